package gateway_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rubin-go/rubin/coord/tree"
)

// TestZkCli drives the gateway with Apache ZooKeeper's own command-line
// client, zkCli.sh, and its Java client library, where the Debian package
// zookeeper and Java are installed.
func TestZkCli(t *testing.T) {
	const script = "/usr/share/zookeeper/bin/zkCli.sh"
	if _, err := os.Stat(script); err != nil {
		t.Skip("Apache ZooKeeper is not installed (Debian package zookeeper)")
	}
	if _, err := exec.LookPath("java"); err != nil {
		t.Skip("no java to run zkCli.sh")
	}
	tc := newTestCluster(t)
	commands := strings.Join([]string{
		"create /cli hello",
		"get /cli",
		"set /cli world",
		"get -s /cli",
		"get -w /cli",
		"set /cli again",
		"create -e -s /cli/eph- x",
		"ls /cli",
		"set -v 0 /cli stale",
		"delete /cli/missing",
		"addauth digest bob:pw",
		"create /cli/secret s auth::cdrwa",
		"get /cli/secret",
		"getAcl /cli/secret",
		"quit",
	}, "\n") + "\n"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, script, "-server", tc.addr)
	cmd.Stdin = strings.NewReader(commands)
	cmd.Env = append(os.Environ(), "ZOO_LOG_DIR="+t.TempDir(), "CLIENT_JVMFLAGS=-Xmx128m")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("zkCli.sh: %v\n%s", err, out.String())
	}
	// What zkCli.sh prints, in order.
	rest := out.String()
	for _, want := range []string{
		"Created /cli", "\nhello\n", "world\n", "dataVersion = 1", "numChildren = 0", "world\n",
		"Created /cli/eph-0000000000", "[eph-0000000000]",
		"version No is not valid : /cli", "Node does not exist: /cli/missing",
		"Created /cli/secret", "\ns\n", "'digest,'" + tree.Digest("bob:pw"), ": cdrwa",
	} {
		i := strings.Index(rest, want)
		if i < 0 {
			t.Fatalf("zkCli.sh's output lacks %q where expected:\n%s", want, out.String())
		}
		rest = rest[i+len(want):]
	}
	// The watch fired; the event thread prints it when it comes.
	if !strings.Contains(out.String(), "type:NodeDataChanged path:/cli") {
		t.Fatalf("no watch event in zkCli.sh's output:\n%s", out.String())
	}
	// quit closed the session: its ephemeral node is gone.
	c := tc.connect(10 * time.Second)
	kids, _, err := c.Children("/cli")
	if err != nil || len(kids) != 1 || kids[0] != "secret" {
		t.Fatalf("after zkCli.sh quit: children %v, %v", kids, err)
	}
}
