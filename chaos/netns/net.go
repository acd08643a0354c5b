package netns

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
)

// host is one network namespace: a machine of the cluster with its own
// network stack, one veth link to the cluster bridge and one address.
type host struct {
	name string // namespace name (ip netns)
	ip   string
	veth string // the host side of its link, on the bridge
	gone bool   // deleted (the host vanished)
}

// network is the bridge and the namespaces on it. Its methods are safe for
// concurrent use.
type network struct {
	prefix string // unique per run: namespace and link names start with it
	bridge string
	subnet string // "10.X.0"
	gw     string // the bridge's address (the harness's own, in the root namespace)

	mu    sync.Mutex
	hosts map[string]*host
	next  int
}

// Available reports why network namespaces cannot be used here ("" when
// they can): root, ip and iptables are needed.
func Available() string {
	if os.Geteuid() != 0 {
		return "network namespaces need root"
	}
	for _, b := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(b); err != nil {
			return fmt.Sprintf("%s is not installed (Debian package %s)", b, map[string]string{"ip": "iproute2", "iptables": "iptables"}[b])
		}
	}
	return ""
}

func sh(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// newNetwork creates the bridge; id (1..250) picks the subnet 10.<id>.0.0/24
// and the names' prefix.
func newNetwork(id int) (*network, error) {
	n := &network{prefix: fmt.Sprintf("pn%d", id), subnet: fmt.Sprintf("10.%d.0", id), hosts: map[string]*host{}, next: 10}
	n.bridge = n.prefix + "br"
	n.gw = n.subnet + ".1"
	// Leftovers of a run of the same id that was killed before its cleanup.
	n.removeStale()
	for _, c := range [][]string{
		{"ip", "link", "add", n.bridge, "type", "bridge"},
		{"ip", "addr", "add", n.gw + "/24", "dev", n.bridge},
		{"ip", "link", "set", n.bridge, "up"},
	} {
		if err := sh(c...); err != nil {
			n.close()
			return nil, err
		}
	}
	return n, nil
}

func (n *network) removeStale() {
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) > 0 && strings.HasPrefix(f[0], n.prefix+"-") {
			_ = sh("ip", "netns", "del", f[0])
		}
	}
	_ = sh("ip", "link", "del", n.bridge)
}

// add creates namespace <prefix>-<name> with its link on the bridge and the
// next address, loopback up, and an empty PILLAR chain hooked into INPUT and
// OUTPUT (where faults go).
func (n *network) add(name string) (*host, error) {
	n.mu.Lock()
	i := n.next
	n.next++
	n.mu.Unlock()
	h := &host{name: n.prefix + "-" + name, ip: fmt.Sprintf("%s.%d", n.subnet, i), veth: fmt.Sprintf("%sv%d", n.prefix, i)}
	peer := fmt.Sprintf("%sp%d", n.prefix, i)
	cmds := [][]string{
		{"ip", "netns", "add", h.name},
		{"ip", "link", "add", h.veth, "type", "veth", "peer", "name", peer},
		{"ip", "link", "set", h.veth, "master", n.bridge, "up"},
		{"ip", "link", "set", peer, "netns", h.name},
		{"ip", "-n", h.name, "link", "set", peer, "name", "eth0"},
		{"ip", "-n", h.name, "addr", "add", h.ip + "/24", "dev", "eth0"},
		{"ip", "-n", h.name, "link", "set", "eth0", "up"},
		{"ip", "-n", h.name, "link", "set", "lo", "up"},
		{"ip", "netns", "exec", h.name, "iptables", "-N", "PILLAR"},
		{"ip", "netns", "exec", h.name, "iptables", "-I", "INPUT", "-j", "PILLAR"},
		{"ip", "netns", "exec", h.name, "iptables", "-I", "OUTPUT", "-j", "PILLAR"},
	}
	for _, c := range cmds {
		if err := sh(c...); err != nil {
			_ = sh("ip", "netns", "del", h.name)
			return nil, fmt.Errorf("netns: host %s: %w", name, err)
		}
	}
	n.mu.Lock()
	n.hosts[name] = h
	n.mu.Unlock()
	return h, nil
}

func (h *host) iptables(args ...string) error {
	return sh(append([]string{"ip", "netns", "exec", h.name, "iptables"}, args...)...)
}

// cut drops every packet between h and each peer address, both ways, in h's
// own firewall (the peers' stacks are untouched: a one-sided partition, as
// a broken link or a firewall change makes one). DROP, not REJECT: the
// other side sees silence and must time out.
func (h *host) cut(peers ...string) error {
	for _, p := range peers {
		if err := h.iptables("-A", "PILLAR", "-d", p, "-j", "DROP"); err != nil {
			return err
		}
		if err := h.iptables("-A", "PILLAR", "-s", p, "-j", "DROP"); err != nil {
			return err
		}
	}
	return nil
}

// lossy drops each packet in or out of h with probability p (iptables'
// statistic match).
func (h *host) lossy(p float64) error {
	return h.iptables("-A", "PILLAR", "-m", "statistic", "--mode", "random", "--probability", fmt.Sprintf("%.4f", p), "-j", "DROP")
}

// heal removes every fault of h.
func (h *host) heal() error {
	if h.gone {
		return nil
	}
	return h.iptables("-F", "PILLAR")
}

// remove deletes h's namespace: its link goes with it (the host vanished).
// Processes still inside must have been killed first.
func (n *network) remove(h *host) error {
	h.gone = true
	return sh("ip", "netns", "del", h.name)
}

// close deletes every namespace and the bridge.
func (n *network) close() error {
	var errs []error
	n.mu.Lock()
	hs := n.hosts
	n.hosts = map[string]*host{}
	n.mu.Unlock()
	for _, h := range hs {
		if !h.gone {
			if err := sh("ip", "netns", "del", h.name); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := sh("ip", "link", "del", n.bridge); err != nil && !strings.Contains(err.Error(), "Cannot find device") {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
