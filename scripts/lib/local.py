"""What the benchmark scripts share about the server they run on this machine."""
import re, socket


def free_port():
    """A TCP port on 127.0.0.1 that is free right now."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def status_kib(pid, field):
    """A field of /proc/PID/status in KiB (VmRSS, VmHWM)."""
    text = open(f"/proc/{pid}/status").read()
    return int(re.search(rf"{field}:\s+(\d+)", text).group(1))
