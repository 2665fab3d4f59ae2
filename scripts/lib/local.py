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


def wait_ready(port, within=120, process=None):
    """Waits until `GET /v2/health/ready` on loopback PORT answers 200; returns the seconds
    it took, or None when `within` seconds pass or `process` (a Popen) exits first."""
    import http.client, time
    started = time.monotonic()
    while time.monotonic() - started < within:
        if process is not None and process.poll() is not None:
            return None
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        try:
            connection.request("GET", "/v2/health/ready")
            if connection.getresponse().status == 200:
                return time.monotonic() - started
        except (OSError, http.client.HTTPException):
            pass
        finally:
            connection.close()
        time.sleep(0.05)
    return None
