// Package netns builds a private network for tests out of Linux network
// namespaces: one namespace per host, each joined by a veth pair to a bridge
// that lives in a namespace of its own, so that nothing in it can route to
// the machine's own interfaces or beyond. Taking a host's bridge port down
// cuts it off from the others; bringing it up heals the cut.
//
// It drives iproute2's ip command and needs root (CAP_NET_ADMIN and
// CAP_SYS_ADMIN). Every host address must lie in 198.51.100.0/24
// (TEST-NET-2, RFC 5737), which no real network uses; New refuses any other.
//
// A Lab is not safe for concurrent use, except that Cut, Heal and Command
// may be called from any goroutine once New returned.
package netns

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
)

// ErrUnavailable is returned by Available and New when this process cannot
// make network namespaces.
var ErrUnavailable = errors.New("netns: network namespaces unavailable")

// Prefix is the only range host addresses may come from.
const Prefix = "198.51.100.0/24"

// Lab is a set of hosts, each in a network namespace of its own, joined by
// a bridge in a further namespace.
type Lab struct {
	bridge string // the bridge's namespace
	hosts  []*Host
	made   []string // namespaces created, for Close
}

// Host is one namespace of a Lab with one address on the bridge.
type Host struct {
	// NS is the namespace's name, for ip netns exec.
	NS string
	// Addr is the host's address.
	Addr netip.Addr
	port string // its veth end on the bridge, in the bridge's namespace
	lab  *Lab
}

// Available reports why this process cannot build a Lab, or nil if it can:
// it must be root and have the ip command with netns support.
func Available() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: not root", ErrUnavailable)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("%w: no ip command (install iproute2): %v", ErrUnavailable, err)
	}
	if out, err := exec.Command("ip", "netns", "list").CombinedOutput(); err != nil {
		return fmt.Errorf("%w: ip netns list: %v: %s", ErrUnavailable, err, bytes.TrimSpace(out))
	}
	return nil
}

// New makes a namespace named name+"-br" holding a bridge, and one
// namespace per address, named name+"-0", name+"-1", …, with the loopback
// device up and an interface eth0 holding that address on the bridge's /24.
// name must be unique on the machine while the Lab lives (namespace names
// are global). On error, what was made is removed again.
func New(name string, addrs []netip.Addr) (*Lab, error) {
	prefix := netip.MustParsePrefix(Prefix)
	for _, a := range addrs {
		if !prefix.Contains(a) || a == prefix.Addr() || a == netip.MustParseAddr("198.51.100.255") {
			return nil, fmt.Errorf("netns: address %v is not a host address of %v", a, Prefix)
		}
	}
	if err := Available(); err != nil {
		return nil, err
	}
	l := &Lab{bridge: name + "-br"}
	if err := l.build(name, addrs, prefix.Bits()); err != nil {
		return nil, errors.Join(err, l.Close())
	}
	return l, nil
}

func (l *Lab) build(name string, addrs []netip.Addr, bits int) error {
	if err := l.addNS(l.bridge); err != nil {
		return err
	}
	if err := ip("-n", l.bridge, "link", "add", "br0", "type", "bridge"); err != nil {
		return err
	}
	if err := ip("-n", l.bridge, "link", "set", "br0", "up"); err != nil {
		return err
	}
	for i, a := range addrs {
		h := &Host{NS: fmt.Sprintf("%s-%d", name, i), Addr: a, port: fmt.Sprintf("p%d", i), lab: l}
		if err := l.addNS(h.NS); err != nil {
			return err
		}
		steps := [][]string{
			{"-n", l.bridge, "link", "add", h.port, "type", "veth", "peer", "name", "eth0", "netns", h.NS},
			{"-n", l.bridge, "link", "set", h.port, "master", "br0"},
			{"-n", l.bridge, "link", "set", h.port, "up"},
			{"-n", h.NS, "addr", "add", netip.PrefixFrom(a, bits).String(), "dev", "eth0"},
			{"-n", h.NS, "link", "set", "eth0", "up"},
		}
		for _, s := range steps {
			if err := ip(s...); err != nil {
				return err
			}
		}
		l.hosts = append(l.hosts, h)
	}
	return nil
}

func (l *Lab) addNS(ns string) error {
	if err := ip("netns", "add", ns); err != nil {
		return err
	}
	l.made = append(l.made, ns)
	return ip("-n", ns, "link", "set", "lo", "up")
}

// Host returns host i, in the order of New's addresses.
func (l *Lab) Host(i int) *Host { return l.hosts[i] }

// Close deletes every namespace of the Lab, which removes its bridge and
// veth pairs. Processes still running in a host's namespace keep it alive
// until they exit, cut off from the rest: kill them first.
func (l *Lab) Close() error {
	var errs []error
	for i := len(l.made) - 1; i >= 0; i-- {
		if err := ip("netns", "delete", l.made[i]); err != nil {
			errs = append(errs, err)
		}
	}
	l.made = nil
	return errors.Join(errs...)
}

// Command returns a command that runs name with args inside the host's
// namespace. ip netns exec replaces itself with name, so the command's
// process is name's own: signals sent to it reach name.
func (h *Host) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", h.NS, name}, args...)...)
}

// Cut takes the host's bridge port down: it can reach no other host, and
// none can reach it, until Heal.
func (h *Host) Cut() error { return ip("-n", h.lab.bridge, "link", "set", h.port, "down") }

// Heal brings the host's bridge port up again.
func (h *Host) Heal() error { return ip("-n", h.lab.bridge, "link", "set", h.port, "up") }

// ip runs the ip command with args.
func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("netns: ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}
