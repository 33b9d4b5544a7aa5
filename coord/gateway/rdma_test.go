package gateway_test

import (
	"testing"

	"github.com/rubin-go/rubin/internal/rdmatest"
	_ "github.com/rubin-go/rubin/transport/rdma" // the "rdma" network
)

// The tests below run the service with the replicas' links to each other
// and to the gateway's bft client over RDMA; ZooKeeper clients still
// reach the gateway over TCP, as they do in a deployment. They need an
// RDMA device: scripts/rdma-test.sh runs them in a Soft-RoCE virtual
// machine.

// TestLockRecipeRDMA is TestLockRecipe over RDMA: go-zookeeper/zk's lock,
// whose watches travel as the replicas' notifications, through a crash of
// the primary, and the crashed replica's return by state transfer.
func TestLockRecipeRDMA(t *testing.T) {
	lockRecipe(t, newClusterOver(t, "rdma", rdmatest.Addr(t), nil, nil))
}

// TestRestartAllDurableRDMA is TestRestartAllDurable over RDMA: every
// replica stopped and recovered from its data directory, the client's
// session and ephemeral node still there.
func TestRestartAllDurableRDMA(t *testing.T) {
	restartAllDurable(t, newClusterOver(t, "rdma", rdmatest.Addr(t), nil, tempDirs(t, 4)))
}

// TestLinearizableRDMA is TestLinearizable over RDMA: the history of
// concurrent sessions through a crash of the primary, its return and cut
// client connections, checked for linearizability.
func TestLinearizableRDMA(t *testing.T) {
	linearizable(t, newClusterOver(t, "rdma", rdmatest.Addr(t), nil, nil))
}
