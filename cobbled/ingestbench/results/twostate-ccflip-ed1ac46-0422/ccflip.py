#!/usr/bin/env python3
"""ccflip PID ALGO[,ALGO...] [--peer-pid P]: set TCP_CONGESTION on every established
server-side TCP socket of process PID (local port = one of PID's listening ports),
optionally only those whose peer is process P, through pidfd_getfd (Linux >= 5.6).
Several ALGOs are applied in turn (cubic,bbr re-initialises BBR: back to STARTUP).
Prints each socket's ports and its CC before/after."""
import ctypes, os, re, socket, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
SYS_pidfd_getfd = 438
def ports_of(pid, state):
    out = subprocess.run(['ss', '-tnpH', 'state', state], capture_output=True, text=True).stdout
    res = []
    for line in out.splitlines():
        m = re.search(r'users:\((.*)\)', line)
        if not m: continue
        f = line.split()
        local, peer = (f[2], f[3]) if state == 'listening' else (f[2], f[3])
        for pm in re.finditer(r'pid=(\d+),fd=(\d+)', m.group(1)):
            if int(pm.group(1)) == pid:
                res.append((local, peer, int(pm.group(2))))
    return res
def main():
    pid = int(sys.argv[1]); algos = sys.argv[2].split(',')
    peer_pid = int(sys.argv[sys.argv.index('--peer-pid')+1]) if '--peer-pid' in sys.argv else None
    listen = {l.rsplit(':', 1)[1] for l, _, _ in ports_of(pid, 'listening')}
    if '--lport' in sys.argv: listen = {sys.argv[sys.argv.index('--lport')+1]}
    peers = None
    if peer_pid:
        peers = {l for l, _, _ in ports_of(peer_pid, 'established')}
    pidfd = os.pidfd_open(pid)
    n = 0
    for local, peer, fd in ports_of(pid, 'established'):
        if local.rsplit(':', 1)[1] not in listen: continue
        if peers is not None and peer not in peers: continue
        nfd = libc.syscall(SYS_pidfd_getfd, pidfd, fd, 0)
        if nfd < 0:
            print('pidfd_getfd', fd, os.strerror(ctypes.get_errno())); continue
        s = socket.socket(fileno=nfd)
        before = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b'\0').decode()
        for a in algos:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, a.encode())
        after = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b'\0').decode()
        s.detach(); os.close(nfd)
        print('pid %d fd %d %s -> %s: %s -> %s' % (pid, fd, local, peer, before, after)); n += 1
    print('ccflip: %d sockets' % n)
main()
