"""One V2 inference request to tensorplug over NATS JetStream (nats-py), its answer printed.

Usage: python3 nats_infer.py NATS_URL MODEL REQUEST.json
Prints the answer's status (what REST would answer) and its body, which is REST's body.
"""
import asyncio
import sys

import nats


async def main(url: str, model: str, request_file: str) -> None:
    client = await nats.connect(url)
    inbox = client.new_inbox()
    answers = await client.subscribe(inbox)
    # A stored message keeps its headers, not its reply subject: the answer's subject
    # travels as a header.
    await client.jetstream().publish(
        f"tensorplug.infer.{model}",
        open(request_file, "rb").read(),
        headers={"Tensorplug-Reply-To": inbox},
    )
    answer = await answers.next_msg(timeout=30)
    print(answer.headers["Tensorplug-Status"], answer.data.decode())
    await client.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
