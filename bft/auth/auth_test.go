package auth

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/wire"
)

// testRand is a deterministic source of key bytes for tests.
type testRand struct{ r *rand.ChaCha8 }

func (t testRand) Read(p []byte) (int, error) { return t.r.Read(p) }

func newRand() testRand {
	return testRand{rand.NewChaCha8([32]byte{'r', 'u', 'b', 'i', 'n'})}
}

func generate(t testing.TB, n, clients int) *Cluster {
	t.Helper()
	c, err := Generate(n, clients, "127.0.0.1", 7000, newRand())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestGenerate(t *testing.T) {
	c := generate(t, 7, 3)
	if c.F != 2 || c.N() != 7 || len(c.Clients) != 3 {
		t.Fatalf("f=%d n=%d clients=%d, want 2, 7, 3", c.F, c.N(), len(c.Clients))
	}
	if got := c.Replicas[6].Addr; got != "127.0.0.1:7006" {
		t.Errorf("replica 6 address %q, want 127.0.0.1:7006", got)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	// Deterministic for a deterministic source, different otherwise.
	if diff := cmp.Diff(c, generate(t, 7, 3)); diff != "" {
		t.Errorf("same randomness, different clusters:\n%s", diff)
	}
	c2, err := Generate(7, 3, "127.0.0.1", 7000, nil)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(c.Replicas[0].PrivateKey, c2.Replicas[0].PrivateKey) {
		t.Error("Generate with crypto/rand gave the test source's keys")
	}
	// IPv6 hosts get brackets.
	c3, err := Generate(4, 0, "::1", 9000, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := c3.Replicas[1].Addr; got != "[::1]:9001" {
		t.Errorf("address %q, want [::1]:9001", got)
	}
}

func TestGenerateErrors(t *testing.T) {
	for _, tt := range []struct {
		n, clients, port int
		want             string
	}{
		{1, 0, 7000, "1 replicas: want 3f+1"},
		{3, 0, 7000, "3 replicas"},
		{5, 0, 7000, "5 replicas"},
		{4, -1, 7000, "-1 clients"},
		{4, 0, 0, "ports 0 to 3"},
		{4, 0, 65533, "ports 65533 to 65536"},
	} {
		_, err := Generate(tt.n, tt.clients, "localhost", tt.port, newRand())
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Generate(%d, %d, %d) = %v, want an error containing %q", tt.n, tt.clients, tt.port, err, tt.want)
		}
	}
	if _, err := Generate(4, 1, "localhost", 7000, bytes.NewReader(make([]byte, 100))); err == nil || !strings.Contains(err.Error(), "reading randomness") {
		t.Errorf("Generate with too little randomness: %v", err)
	}
}

func TestSaveLoad(t *testing.T) {
	c := generate(t, 4, 2)
	path := filepath.Join(t.TempDir(), "cluster.json")
	// A looser file already there must not keep its mode.
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.Save(path); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if mode := fi.Mode().Perm(); mode != 0o600 {
		t.Errorf("saved with mode %o, want 600", mode)
	}
	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(c, got); diff != "" {
		t.Errorf("Load(Save(c)) differs (-want +got):\n%s", diff)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("the directory holds %d files after Save, want 1 (temporary file left?)", len(entries))
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if _, err := Load(filepath.Join(dir, "missing.json")); err == nil {
		t.Error("Load of a missing file succeeded")
	}
	if _, err := Load(write("bad.json", "{")); err == nil {
		t.Error("Load of bad JSON succeeded")
	}
	_, err := Load(write("unknown.json", `{"f":1,"replicas":[],"clients":[],"privatekey":"x"}`))
	if err == nil || !strings.Contains(err.Error(), "unknown field") {
		t.Errorf("Load with a misspelt field: %v, want unknown field", err)
	}
	_, err = Load(write("invalid.json", `{"f":1,"replicas":[],"clients":[]}`))
	if err == nil || !strings.Contains(err.Error(), "invalid.json: 0 replicas: want 3f+1 = 4") {
		t.Errorf("Load of an invalid configuration: %v", err)
	}
}

func TestValidate(t *testing.T) {
	for _, tt := range []struct {
		name   string
		change func(c *Cluster)
		want   string
	}{
		{"f zero", func(c *Cluster) { c.F = 0 }, "f = 0"},
		{"n not 3f+1", func(c *Cluster) { c.Replicas = c.Replicas[:3] }, "3 replicas: want 3f+1 = 4"},
		{"n not 3f+1 (f)", func(c *Cluster) { c.F = 2 }, "4 replicas: want 3f+1 = 7"},
		{"replica id", func(c *Cluster) { c.Replicas[2].ID = 3 }, "replica at index 2 has ID 3"},
		{"duplicate replica id", func(c *Cluster) { c.Replicas[3].ID = 2 }, "index 3 has ID 2"},
		{"address", func(c *Cluster) { c.Replicas[1].Addr = "localhost" }, "replica 1: address"},
		{"port", func(c *Cluster) { c.Replicas[1].Addr = "localhost:http" }, `port "http"`},
		{"port range", func(c *Cluster) { c.Replicas[1].Addr = "localhost:70000" }, `port "70000"`},
		{"duplicate address", func(c *Cluster) { c.Replicas[3].Addr = c.Replicas[0].Addr }, "already replica 0's"},
		{"public key size", func(c *Cluster) { c.Replicas[1].PublicKey = c.Replicas[1].PublicKey[:31] }, "replica 1: public key: 31 bytes"},
		{"private key size", func(c *Cluster) { c.Replicas[1].PrivateKey = append(c.Replicas[1].PrivateKey, 0) }, "replica 1: private key: 33 bytes"},
		{"key pair mismatch", func(c *Cluster) { c.Replicas[1].PublicKey = c.Replicas[2].PublicKey }, "does not match"},
		{"mac row length", func(c *Cluster) { c.Replicas[2].MACKeys = c.Replicas[2].MACKeys[:3] }, "replica 2: 3 MAC keys"},
		{"mac key size", func(c *Cluster) { c.Replicas[2].MACKeys[0] = make([]byte, 16) }, "MAC key for replica 0: 16 bytes"},
		{"own mac key", func(c *Cluster) { c.Replicas[2].MACKeys[2] = make([]byte, 32) }, "MAC key with itself"},
		{"asymmetric", func(c *Cluster) { c.Replicas[3].MACKeys[1][5] ^= 1 }, "replicas 1 and 3: their MAC keys for each other differ"},
		{"duplicate client", func(c *Cluster) { c.Clients[1].ID = c.Clients[0].ID }, "client 0: duplicate ID"},
		{"client keys", func(c *Cluster) { c.Clients[1].Keys = c.Clients[1].Keys[:2] }, "client 1: 2 keys"},
		{"client key size", func(c *Cluster) { c.Clients[1].Keys[3] = nil }, "client 1: key for replica 3: 0 bytes"},
		{"holder range", func(c *Cluster) { c.Holder = &Holder{ID: 4} }, "holder: no replica 4"},
		{"holder with secrets", func(c *Cluster) { c.Holder = &Holder{ID: 1} }, "replica 0: holds the replica's secret keys, but the configuration is replica 1's"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := generate(t, 4, 2)
			tt.change(c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.want)
			}
			// Save refuses what Validate rejects.
			if err := c.Save(filepath.Join(t.TempDir(), "c.json")); err == nil {
				t.Error("Save of an invalid configuration succeeded")
			}
		})
	}
}

func TestStripped(t *testing.T) {
	c := generate(t, 4, 3)
	dir := t.TempDir()
	forR, err := c.ForReplica(2)
	if err != nil {
		t.Fatal(err)
	}
	forC, err := c.ForClient(1)
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*Cluster{"replica": forR, "client": forC} {
		path := filepath.Join(dir, name+".json")
		if err := s.Save(path); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, err := Load(path)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if diff := cmp.Diff(s, got); diff != "" {
			t.Errorf("%s: round trip differs:\n%s", name, diff)
		}
		data, _ := os.ReadFile(path)
		// Other parties' secrets are not in the file.
		for i, r := range c.Replicas {
			if (name == "client" || i != 2) && strings.Contains(string(data), b64(r.PrivateKey)) {
				t.Errorf("%s file holds replica %d's private key", name, i)
			}
		}
		// Public parts stay.
		for i, r := range c.Replicas {
			if got.Replicas[i].Addr != r.Addr || !bytes.Equal(got.Replicas[i].PublicKey, r.PublicKey) {
				t.Errorf("%s file lost replica %d's address or public key", name, i)
			}
		}
	}
	// Replica 2's file holds its links and each client's key with it.
	for j := range bft.ReplicaID(4) {
		if j == 2 {
			continue
		}
		if got, want := forR.LinkKey(2, j), c.LinkKey(2, j); got == nil || !bytes.Equal(got, want) {
			t.Errorf("replica 2's file: link key with %d wrong", j)
		}
		if got, want := forR.LinkKey(j, 2), c.LinkKey(2, j); !bytes.Equal(got, want) {
			t.Errorf("replica 2's file: LinkKey(%d, 2) wrong", j)
		}
	}
	if forR.LinkKey(0, 1) != nil {
		t.Error("replica 2's file knows the link key of replicas 0 and 1")
	}
	if forR.ClientLinkKey(0, 2) == nil || forR.ClientLinkKey(0, 1) != nil {
		t.Error("replica 2's file: wrong client link keys")
	}
	if forC.ClientLinkKey(1, 3) == nil || forC.ClientLinkKey(0, 3) != nil || forC.LinkKey(0, 1) != nil {
		t.Error("client 1's file: wrong link keys")
	}
	// Stripped files cannot act for others.
	if _, err := NewReplicaAuth(forR, 1); err == nil || !strings.Contains(err.Error(), "not in replica 2's configuration") {
		t.Errorf("NewReplicaAuth(replica 2's file, 1) = %v", err)
	}
	if _, err := NewReplicaAuth(forC, 0); err == nil {
		t.Error("NewReplicaAuth from a client's file succeeded")
	}
	if _, err := NewClientAuth(forR, 0); err == nil {
		t.Error("NewClientAuth from a replica's file succeeded")
	}
	if _, err := NewClientAuth(forC, 0); err == nil {
		t.Error("NewClientAuth(client 1's file, 0) succeeded")
	}
	if _, err := forR.ForReplica(1); err == nil {
		t.Error("ForReplica(1) of replica 2's file succeeded")
	}
	if _, err := forR.ForClient(1); err == nil {
		t.Error("ForClient of replica 2's file succeeded")
	}
	if _, err := c.ForReplica(4); err == nil {
		t.Error("ForReplica(4) of 4 succeeded")
	}
	if _, err := c.ForClient(7); err == nil {
		t.Error("ForClient(7) of 3 succeeded")
	}
	// But they work for their holder, with the dealer's keys.
	ra, err := NewReplicaAuth(forR, 2)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := NewClientAuth(forC, 1)
	if err != nil {
		t.Fatal(err)
	}
	full, err := NewReplicaAuth(c, 0)
	if err != nil {
		t.Fatal(err)
	}
	req := &bft.Request{Timestamp: 5, Op: []byte("op")}
	ca.Sign(req)
	if !ra.VerifyRequest(req) || !full.VerifyRequest(req) {
		t.Error("a request signed from the client's file does not verify")
	}
	p := &bft.Prepare{View: 1, Seq: 2, Replica: 2}
	if s := ra.Sign(p); !full.Verify(2, p, s) {
		t.Error("a signature from replica 2's file does not verify")
	}
	// Stripping is idempotent and copies.
	again, err := forR.ForReplica(2)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(forR, again); diff != "" {
		t.Errorf("ForReplica of a replica's own file differs:\n%s", diff)
	}
	again.Replicas[2].PrivateKey[0] ^= 1
	if bytes.Equal(again.Replicas[2].PrivateKey, forR.Replicas[2].PrivateKey) {
		t.Error("ForReplica shares key memory with its source")
	}
	// A stripped file with another party's secret is rejected.
	bad, _ := c.ForReplica(2)
	bad.Clients[0].Keys[1] = bytes.Clone(c.Clients[0].Keys[1])
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "client 0: holds its key for replica 1, but the configuration is replica 2's") {
		t.Errorf("Validate of a replica file with another's client key: %v", err)
	}
	bad, _ = c.ForClient(1)
	bad.Clients = append(bad.Clients, c.Clients[0])
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "client 0: holds the client's keys") {
		t.Errorf("Validate of a client file with another client's keys: %v", err)
	}
}

// TestForClients: a party that speaks for several clients (a gateway)
// keeps their keys and nothing else, and cannot act as a replica or as a
// client it does not hold.
func TestForClients(t *testing.T) {
	c := generate(t, 4, 6)
	g, err := c.ForClients([]bft.ClientID{4, 2, 3, 2})
	if err != nil {
		t.Fatal(err)
	}
	if want := []bft.ClientID{2, 3, 4}; !slices.Equal(g.Holder.Clients, want) {
		t.Fatalf("holder clients %v, want %v", g.Holder.Clients, want)
	}
	if got := g.Holder.String(); got != "the holder of clients 2-4" {
		t.Errorf("holder %q", got)
	}
	path := filepath.Join(t.TempDir(), "gateway.json")
	if err := g.Save(path); err != nil {
		t.Fatal(err)
	}
	g, err = Load(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range g.Replicas {
		if len(r.PrivateKey) != 0 || len(r.MACKeys) != 0 {
			t.Errorf("replica %d's secrets in a gateway's file", r.ID)
		}
	}
	if len(g.Clients) != 3 {
		t.Errorf("%d clients in the file, want the 3 held", len(g.Clients))
	}
	for _, id := range []bft.ClientID{2, 3, 4} {
		if _, err := NewClientAuth(g, id); err != nil {
			t.Errorf("client %d from the gateway's file: %v", id, err)
		}
		if _, err := g.ForClient(id); err != nil {
			t.Errorf("ForClient(%d) of the gateway's file: %v", id, err)
		}
	}
	if _, err := NewClientAuth(g, 1); err == nil {
		t.Error("a gateway's file acts as a client it does not hold")
	}
	for r := range 4 {
		if _, err := NewReplicaAuth(g, bft.ReplicaID(r)); err == nil {
			t.Errorf("a gateway's file acts as replica %d", r)
		}
		if _, err := g.ForReplica(bft.ReplicaID(r)); err == nil {
			t.Errorf("ForReplica(%d) of a gateway's file succeeded", r)
		}
	}
	if _, err := g.ForClients([]bft.ClientID{4, 5}); err == nil {
		t.Error("ForClients of a client the gateway does not hold succeeded")
	}
	// A replica's file cannot make a gateway's: it holds only its own
	// key with each client.
	r1, _ := c.ForReplica(1)
	if _, err := r1.ForClients([]bft.ClientID{0}); err == nil {
		t.Error("ForClients of a replica's file succeeded")
	}
	for _, tc := range []struct {
		name   string
		change func(*Cluster)
		want   string
	}{
		{"another client's keys", func(b *Cluster) { b.Clients = append(b.Clients, c.Clients[5]) }, "client 5: holds the client's keys, but the configuration is the holder of clients 2-4's"},
		{"a replica's key", func(b *Cluster) { b.Replicas[0].PrivateKey = bytes.Clone(c.Replicas[0].PrivateKey) }, "replica 0: holds the replica's secret keys"},
		{"a held client missing", func(b *Cluster) { b.Clients = b.Clients[1:] }, "holder: 1 of its 3 clients are not in the configuration"},
		{"clients out of order", func(b *Cluster) { b.Holder.Clients = []bft.ClientID{3, 2, 4} }, "holder: clients out of order"},
		{"a client named twice", func(b *Cluster) { b.Holder.Clients = []bft.ClientID{2, 3, 3, 4} }, "holder: a client named twice"},
		{"clients and one party", func(b *Cluster) { b.Holder.ID = 1 }, "holder: names clients and one party too"},
	} {
		b, _ := c.ForClients([]bft.ClientID{2, 3, 4})
		tc.change(b)
		if err := b.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestForReplicaWithClients: a replica that also speaks as clients of
// its own (an orderer) keeps its secrets and those clients' keys, no
// other replica's secret and no other client's key but the one each
// shares with it; it acts as itself and those clients only.
func TestForReplicaWithClients(t *testing.T) {
	c := generate(t, 4, 8)
	dir := t.TempDir()
	if err := c.SaveReplicas(dir, func(id bft.ReplicaID) []bft.ClientID { return []bft.ClientID{bft.ClientID(id) + 4, bft.ClientID(id)} }); err != nil {
		t.Fatal(err)
	}
	o, err := Load(filepath.Join(dir, "replica-1.json"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (&Holder{ID: 1, Clients: []bft.ClientID{1, 5}, Replica: true}); !cmp.Equal(o.Holder, want) {
		t.Fatalf("holder %+v, want %+v", o.Holder, want)
	}
	if got := o.Holder.String(); got != "replica 1 with clients 1 and 5" {
		t.Errorf("holder %q", got)
	}
	if direct, _ := c.ForReplica(1, 5, 1, 5); !cmp.Equal(o, direct) {
		t.Error("SaveReplicas's file differs from ForReplica's copy")
	}
	data, _ := os.ReadFile(filepath.Join(dir, "replica-1.json"))
	own := func(secret string) bool { return strings.Contains(string(data), secret) }
	for i, r := range c.Replicas {
		if i != 1 && own(b64(r.PrivateKey)) {
			t.Errorf("replica 1's file holds replica %d's private key", i)
		}
		for j, k := range r.MACKeys {
			if i != 1 && j != 1 && len(k) > 0 && own(b64(k)) {
				t.Errorf("replica 1's file holds the MAC key of replicas %d and %d", i, j)
			}
		}
	}
	for _, cl := range c.Clients {
		for r, k := range cl.Keys {
			if held := cl.ID == 1 || cl.ID == 5 || r == 1; own(b64(k)) != held {
				t.Errorf("replica 1's file: client %d's key for replica %d: present %v, want %v", cl.ID, r, !held, held)
			}
		}
	}
	for id := range bft.ReplicaID(5) {
		if got := o.HoldsReplica(id); got != (id == 1) {
			t.Errorf("HoldsReplica(%d) = %v", id, got)
		}
	}
	for id := range bft.ClientID(9) {
		if got := o.HoldsClient(id); got != (id == 1 || id == 5) {
			t.Errorf("HoldsClient(%d) = %v", id, got)
		}
		if got := c.HoldsClient(id); got != (id < 8) {
			t.Errorf("the dealer's HoldsClient(%d) = %v", id, got)
		}
	}
	// It acts as replica 1 and as clients 1 and 5, with the dealer's keys.
	ra, err := NewReplicaAuth(o, 1)
	if err != nil {
		t.Fatal(err)
	}
	full, _ := NewReplicaAuth(c, 3)
	for _, id := range []bft.ClientID{1, 5} {
		ca, err := NewClientAuth(o, id)
		if err != nil {
			t.Fatal(err)
		}
		req := &bft.Request{Client: id, Timestamp: 9, Op: []byte("op")}
		ca.Sign(req)
		if !ra.VerifyRequest(req) || !full.VerifyRequest(req) {
			t.Errorf("client %d's request from replica 1's file does not verify", id)
		}
	}
	if _, err := NewClientAuth(o, 2); err == nil {
		t.Error("replica 1's file acts as client 2")
	}
	if _, err := NewReplicaAuth(o, 2); err == nil {
		t.Error("replica 1's file acts as replica 2")
	}
	// It strips to what it holds, and no further.
	if _, err := o.ForReplica(1, 5); err != nil {
		t.Errorf("ForReplica(1, 5) of replica 1's file: %v", err)
	}
	if _, err := o.ForClients([]bft.ClientID{1, 5}); err != nil {
		t.Errorf("ForClients(1, 5) of replica 1's file: %v", err)
	}
	if _, err := o.ForReplica(1, 2); err == nil || !strings.Contains(err.Error(), "client 2's keys are not in replica 1 with clients 1 and 5's configuration") {
		t.Errorf("ForReplica(1, 2) of replica 1's file: %v", err)
	}
	if _, err := o.ForReplica(2, 1); err == nil {
		t.Error("ForReplica(2, 1) of replica 1's file succeeded")
	}
	if _, err := o.ForClient(2); err == nil {
		t.Error("ForClient(2) of replica 1's file succeeded")
	}
	r1, _ := c.ForReplica(1)
	if _, err := r1.ForReplica(1, 1); err == nil {
		t.Error("ForReplica(1, 1) of replica 1's file without clients succeeded")
	}
	if _, err := c.ForReplica(1, 8); err == nil || !strings.Contains(err.Error(), "no client 8") {
		t.Errorf("ForReplica(1, 8) of 8 clients: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(*Cluster)
		want   string
	}{
		{"another client's key", func(b *Cluster) { b.Clients[0].Keys[2] = bytes.Clone(c.Clients[0].Keys[2]) }, "client 0: holds its key for replica 2, but the configuration is replica 1 with clients 1 and 5's"},
		{"another replica's key", func(b *Cluster) { b.Replicas[0].PrivateKey = bytes.Clone(c.Replicas[0].PrivateKey) }, "replica 0: holds the replica's secret keys, but the configuration is replica 1 with clients 1 and 5's"},
		{"a held client's key missing", func(b *Cluster) { b.Clients[5].Keys[3] = nil }, "client 5: key for replica 3: 0 bytes"},
		{"a held client missing", func(b *Cluster) { b.Clients = slices.Delete(b.Clients, 5, 6) }, "holder: 1 of its 2 clients are not in the configuration"},
		{"its own key missing", func(b *Cluster) { b.Replicas[1].PrivateKey = nil }, "replica 1: private key: 0 bytes"},
		{"a replica and a client", func(b *Cluster) { b.Holder.Client = true }, "holder: a replica and a client at once"},
		{"no clients", func(b *Cluster) { b.Holder.Clients = nil }, "holder: a replica with clients of its own names none"},
		{"no such replica", func(b *Cluster) { b.Holder.ID = 4 }, "holder: no replica 4"},
		{"not said to be a replica", func(b *Cluster) { b.Holder.Replica = false }, "holder: names clients and one party too"},
	} {
		b, _ := c.ForReplica(1, 1, 5)
		tc.change(b)
		if err := b.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate: %v, want %q", tc.name, err, tc.want)
		}
	}
	// Replica 0 with its clients, not said to be a replica, would be a
	// holder of clients 0 and 4 with a replica's secrets.
	b, _ := c.ForReplica(0, 0, 4)
	b.Holder.Replica = false
	if err := b.Validate(); err == nil || !strings.Contains(err.Error(), "replica 0: holds the replica's secret keys, but the configuration is the holder of clients 0 and 4's") {
		t.Errorf("replica 0's file as a holder of its clients only: %v", err)
	}
}

func TestSaveEach(t *testing.T) {
	c := generate(t, 4, 2)
	dir := t.TempDir()
	if err := c.SaveEach(dir); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"replica-0.json", "replica-3.json", "client-0.json", "client-1.json"} {
		s, err := Load(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if s.Holder == nil {
			t.Errorf("%s: no holder", name)
		}
	}
	s, _ := c.ForReplica(0)
	if err := s.SaveEach(dir); err == nil {
		t.Error("SaveEach of a stripped configuration succeeded")
	}
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// clone deep-copies m through the codec: the decoded copy aliases a
// buffer of its own.
func clone(t *testing.T, m bft.Message) bft.Message {
	t.Helper()
	c, err := wire.Decode(wire.Append(nil, m))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func setSig(m bft.Message, sig []byte) {
	switch m := m.(type) {
	case *bft.Checkpoint:
		m.Sig = sig
	case *bft.ViewChange:
		m.Sig = sig
	case *bft.NewView:
		m.Sig = sig
	}
}

func TestLinkKeys(t *testing.T) {
	c := generate(t, 4, 2)
	k01 := c.LinkKey(0, 1)
	if len(k01) != KeySize || !bytes.Equal(k01, c.LinkKey(1, 0)) {
		t.Fatal("LinkKey is not a symmetric 32-byte key")
	}
	if bytes.Equal(k01, c.Replicas[0].MACKeys[1]) {
		t.Error("LinkKey returns the raw pairwise key, not a derived one")
	}
	if bytes.Equal(k01, c.LinkKey(0, 2)) {
		t.Error("two pairs share a link key")
	}
	if c.LinkKey(1, 1) != nil || c.LinkKey(0, 4) != nil {
		t.Error("LinkKey of a replica with itself or a stranger is not nil")
	}
	kc := c.ClientLinkKey(1, 3)
	if len(kc) != KeySize || bytes.Equal(kc, c.Clients[1].Keys[3]) || bytes.Equal(kc, derive(c.Clients[1].Keys[3], labelRequest)) {
		t.Error("ClientLinkKey is not a key of its own")
	}
	if c.ClientLinkKey(9, 0) != nil || c.ClientLinkKey(0, 4) != nil {
		t.Error("ClientLinkKey for a stranger is not nil")
	}
}

// TestMACKey checks the precomputed HMAC against crypto/hmac.
func TestMACKey(t *testing.T) {
	key := bytes.Repeat([]byte{7}, KeySize)
	k := newMACKey(key)
	h := getHasher()
	defer putHasher(h)
	for _, size := range []int{0, 1, 20, 63, 64, 65, 1000} {
		r := &bft.Request{Client: 300, Timestamp: 1 << 50, Op: bytes.Repeat([]byte{'x'}, size)}
		m := hmac.New(sha256.New, key)
		m.Write(binary.AppendUvarint(nil, uint64(r.Client)))
		m.Write(binary.AppendUvarint(nil, r.Timestamp))
		m.Write(binary.AppendUvarint(nil, 0)) // flags
		m.Write(binary.AppendUvarint(nil, uint64(len(r.Op))))
		m.Write(r.Op)
		want := m.Sum(nil)[:MACSize]
		if got := k.sum(h, r); !bytes.Equal(got, want) {
			t.Errorf("op of %d bytes: MAC %x, want %x", size, got, want)
		}
	}
	// A read's nonce follows its flags.
	r := &bft.Request{Client: 300, Timestamp: 1 << 50, ReadOnly: true, Nonce: 1 << 40, Op: []byte("get")}
	m := hmac.New(sha256.New, key)
	m.Write(binary.AppendUvarint(nil, uint64(r.Client)))
	m.Write(binary.AppendUvarint(nil, r.Timestamp))
	m.Write(binary.AppendUvarint(nil, 1)) // flags: read-only
	m.Write(binary.AppendUvarint(nil, r.Nonce))
	m.Write(binary.AppendUvarint(nil, uint64(len(r.Op))))
	m.Write(r.Op)
	if got, want := k.sum(h, r), m.Sum(nil)[:MACSize]; !bytes.Equal(got, want) {
		t.Errorf("read: MAC %x, want %x", got, want)
	}
}

// signedSamples has one message of every signed type (the normal-case
// messages are not signed: the links authenticate them).
func signedSamples() []bft.Message {
	d := bft.Digest{1, 2, 3}
	batch := []bft.Request{{Client: 1, Timestamp: 2, Op: []byte("op"), Auth: make([]byte, 64)}}
	header := bft.PrePrepare{View: 2, Seq: 10, Digest: bft.BatchDigest(1<<60, batch)} // as new views carry it
	cp := bft.Checkpoint{Seq: 8, State: d, Replica: 3, Sig: make([]byte, 64)}
	vc := bft.ViewChange{
		View: 2, StableSeq: 8, Stable: []bft.Checkpoint{cp},
		Prepared:    []bft.Claim{{View: 1, Seq: 10, Digest: header.Digest}},
		PrePrepared: []bft.Claim{{View: 1, Seq: 10, Digest: header.Digest}, {View: 0, Seq: 10, Digest: d}},
		Replica:     1,
	}
	return []bft.Message{
		&bft.Checkpoint{Seq: 8, State: d, Replica: 1},
		&vc,
		&bft.NewView{View: 2, ViewChanges: []bft.ViewChange{vc}, PrePrepares: []bft.PrePrepare{header}, Replica: 1},
	}
}

// mutate changes one signed field of m in place.
func mutate(m bft.Message) {
	switch m := m.(type) {
	case *bft.Checkpoint:
		m.State[0] ^= 1
	case *bft.ViewChange:
		m.Stable[0].Sig[0] ^= 1
		m.PrePrepared[1].View++
	case *bft.NewView:
		m.PrePrepares[0].View++
	}
}

func TestSignVerify(t *testing.T) {
	c := generate(t, 4, 1)
	auths := make([]*ReplicaAuth, 4)
	for i := range auths {
		a, err := NewReplicaAuth(c, bft.ReplicaID(i))
		if err != nil {
			t.Fatal(err)
		}
		auths[i] = a
	}
	for _, m := range signedSamples() {
		sig := auths[1].Sign(m)
		if len(sig) != 64 {
			t.Fatalf("%T: signature of %d bytes", m, len(sig))
		}
		for _, v := range auths {
			if !v.Verify(1, m, sig) {
				t.Errorf("%T: replica %d rejects replica 1's signature", m, v.ID())
			}
		}
		// The Sig field is not signed: setting it keeps the signature.
		withSig := clone(t, m)
		setSig(withSig, sig)
		if !auths[0].Verify(1, withSig, sig) {
			t.Errorf("%T: the signature does not verify once stored in the message", m)
		}
		for _, id := range []bft.ReplicaID{0, 2, 3} {
			if auths[0].Verify(id, m, sig) {
				t.Errorf("%T: replica 1's signature verifies as replica %d's", m, id)
			}
		}
		if auths[0].Verify(4, m, sig) || auths[0].Verify(^bft.ReplicaID(0), m, sig) {
			t.Errorf("%T: a signature verifies for an unknown replica", m)
		}
		if auths[0].Verify(1, m, sig[:63]) || auths[0].Verify(1, m, nil) {
			t.Errorf("%T: a short signature verifies", m)
		}
		changed := clone(t, m)
		mutate(changed)
		if auths[0].Verify(1, changed, sig) {
			t.Errorf("%T: the signature verifies after a field changed", m)
		}
	}
	// The type byte separates domains: a commit's fields signed as a
	// prepare's do not verify for the commit.
	p := &bft.Prepare{View: 1, Seq: 2, Replica: 1}
	if auths[0].Verify(1, &bft.Commit{View: 1, Seq: 2, Replica: 1}, auths[1].Sign(p)) {
		t.Error("a prepare's signature verifies for a commit")
	}
}

func TestVerifyRequest(t *testing.T) {
	c := generate(t, 4, 3)
	ca, err := NewClientAuth(c, 1)
	if err != nil {
		t.Fatal(err)
	}
	ras := make([]*ReplicaAuth, 4)
	for i := range ras {
		if ras[i], err = NewReplicaAuth(c, bft.ReplicaID(i)); err != nil {
			t.Fatal(err)
		}
	}
	r := &bft.Request{Client: 99, Timestamp: 42, Op: []byte("put k v")}
	ca.Sign(r)
	if r.Client != 1 || len(r.Auth) != 4*MACSize {
		t.Fatalf("Sign set client %d and %d auth bytes, want 1 and %d", r.Client, len(r.Auth), 4*MACSize)
	}
	for _, ra := range ras {
		if !ra.VerifyRequest(r) {
			t.Errorf("replica %d rejects the client's request", ra.ID())
		}
	}
	// Each replica checks its own entry only: a flipped byte in entry i
	// fails at replica i and nowhere else.
	for i := range 4 * MACSize {
		bad := *r
		bad.Auth = bytes.Clone(r.Auth)
		bad.Auth[i] ^= 0x80
		for _, ra := range ras {
			if got, want := ra.VerifyRequest(&bad), int(ra.ID()) != i/MACSize; got != want {
				t.Errorf("byte %d flipped: replica %d says %v, want %v", i, ra.ID(), got, want)
			}
		}
	}
	check := func(name string, change func(*bft.Request)) {
		bad := *r
		bad.Auth = bytes.Clone(r.Auth)
		bad.Op = bytes.Clone(r.Op)
		change(&bad)
		for _, ra := range ras {
			if ra.VerifyRequest(&bad) {
				t.Errorf("%s: replica %d accepts", name, ra.ID())
			}
		}
	}
	check("other client", func(b *bft.Request) { b.Client = 2 })
	check("unknown client", func(b *bft.Request) { b.Client = 99 })
	check("timestamp", func(b *bft.Request) { b.Timestamp++ })
	check("op", func(b *bft.Request) { b.Op[0] ^= 1 })
	check("op extended", func(b *bft.Request) { b.Op = append(b.Op, 0) })
	check("short auth", func(b *bft.Request) { b.Auth = b.Auth[:len(b.Auth)-1] })
	check("long auth", func(b *bft.Request) { b.Auth = append(b.Auth, 0) })
	check("no auth", func(b *bft.Request) { b.Auth = nil })
	check("restart", func(b *bft.Request) { b.Restart = true })
	// A read's flag and nonce are covered: an ordered request cannot
	// pass for a read, nor one read for another.
	read := &bft.Request{Client: 1, Timestamp: 42, ReadOnly: true, Nonce: 5, Op: r.Op}
	ca.Sign(read)
	for _, ra := range ras {
		if !ra.VerifyRequest(read) {
			t.Errorf("replica %d rejects the client's read", ra.ID())
		}
	}
	check("read-only", func(b *bft.Request) { b.ReadOnly = true })
	for _, change := range []func(*bft.Request){
		func(b *bft.Request) { b.Nonce++ },
		func(b *bft.Request) { b.ReadOnly, b.Nonce = false, 0 },
	} {
		bad := *read
		change(&bad)
		if ras[0].VerifyRequest(&bad) {
			t.Errorf("a read changed to %+v passes", bad)
		}
	}
	if ras[0].VerifyRequest(nil) {
		t.Error("VerifyRequest(nil) is true")
	}
	// Another client's authenticator for the same fields differs.
	other, _ := NewClientAuth(c, 2)
	r2 := &bft.Request{Timestamp: r.Timestamp, Op: r.Op}
	other.Sign(r2)
	r2.Client = 1
	if ras[0].VerifyRequest(r2) {
		t.Error("client 2's authenticator passes for client 1")
	}
	// Sign reuses Auth's capacity.
	buf := make([]byte, 0, 100)
	r3 := &bft.Request{Op: []byte("x"), Auth: buf}
	ca.Sign(r3)
	if &r3.Auth[0] != &buf[:1][0] {
		t.Error("Sign did not reuse Auth's capacity")
	}
	if !ras[3].VerifyRequest(r3) {
		t.Error("reused-buffer request does not verify")
	}
}

// TestConcurrent exercises the authenticators from many goroutines; run
// it with -race.
func TestConcurrent(t *testing.T) {
	c := generate(t, 4, 2)
	ra, _ := NewReplicaAuth(c, 0)
	ca, _ := NewClientAuth(c, 1)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				r := &bft.Request{Timestamp: uint64(i), Op: []byte{byte(g), byte(i)}}
				ca.Sign(r)
				if !ra.VerifyRequest(r) {
					t.Error("request rejected")
					return
				}
				p := &bft.Prepare{View: uint64(g), Seq: uint64(i)}
				if !ra.Verify(0, p, ra.Sign(p)) {
					t.Error("signature rejected")
					return
				}
			}
		})
	}
	wg.Wait()
}

func BenchmarkSign(b *testing.B) {
	c := generate(b, 4, 1)
	ra, _ := NewReplicaAuth(c, 1)
	for _, m := range benchMessages() {
		b.Run(m.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ra.Sign(m.m)
			}
		})
	}
}

func BenchmarkVerify(b *testing.B) {
	c := generate(b, 4, 1)
	ra, _ := NewReplicaAuth(c, 1)
	for _, m := range benchMessages() {
		b.Run(m.name, func(b *testing.B) {
			sig := ra.Sign(m.m)
			b.ReportAllocs()
			for b.Loop() {
				if !ra.Verify(1, m.m, sig) {
					b.Fatal("rejected")
				}
			}
		})
	}
}

func BenchmarkVerifyRequest(b *testing.B) {
	c := generate(b, 4, 1)
	ra, _ := NewReplicaAuth(c, 2)
	ca, _ := NewClientAuth(c, 0)
	for _, size := range []int{16, 1024} {
		r := &bft.Request{Timestamp: 1, Op: make([]byte, size)}
		ca.Sign(r)
		b.Run(sizeName(size), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if !ra.VerifyRequest(r) {
					b.Fatal("rejected")
				}
			}
		})
	}
	// For comparison: crypto/hmac with a fresh hmac.New per call.
	key := derive(c.Clients[0].Keys[2], labelRequest)
	b.Run("hmac.New-16B", func(b *testing.B) {
		op := make([]byte, 16)
		var hdr [30]byte
		b.ReportAllocs()
		for b.Loop() {
			m := hmac.New(sha256.New, key)
			n := binary.PutUvarint(hdr[:], 0)
			n += binary.PutUvarint(hdr[n:], 1)
			n += binary.PutUvarint(hdr[n:], 16)
			m.Write(hdr[:n])
			m.Write(op)
			var sum [32]byte
			m.Sum(sum[:0])
		}
	})
}

func BenchmarkClientSign(b *testing.B) {
	c := generate(b, 4, 1)
	ca, _ := NewClientAuth(c, 0)
	r := &bft.Request{Timestamp: 1, Op: make([]byte, 16)}
	b.ReportAllocs()
	for b.Loop() {
		ca.Sign(r)
	}
}

func sizeName(n int) string { return fmt.Sprintf("op-%dB", n) }

type benchMessage struct {
	name string
	m    bft.Message
}

func benchMessages() []benchMessage {
	batch := make([]bft.Request, 64)
	for i := range batch {
		batch[i] = bft.Request{Client: bft.ClientID(i), Timestamp: 1, Op: make([]byte, 100), Auth: make([]byte, 4*MACSize)}
	}
	pp := &bft.PrePrepare{View: 1, Seq: 1000, Digest: bft.BatchDigest(0, batch), Batch: batch}
	return []benchMessage{
		{"prepare", &bft.Prepare{View: 1, Seq: 1000, Digest: bft.Digest{1}, Replica: 1}},
		{"pre-prepare-64x100B", pp},
	}
}

// TestSignaturesAsCryptoEd25519: ReplicaAuth's signatures are the bytes
// crypto/ed25519 makes, and it accepts exactly what crypto/ed25519.Verify
// accepts: every replica of a cluster must agree on which signatures are
// valid, whatever its Ed25519 code. Among the rejected: a flipped bit, a
// signature whose S is not reduced (S+L, which a lax verifier would
// take), another replica's key, and a truncated signature.
func TestSignaturesAsCryptoEd25519(t *testing.T) {
	c := generate(t, 4, 1)
	a, err := NewReplicaAuth(c, 1)
	if err != nil {
		t.Fatal(err)
	}
	priv := ed25519.NewKeyFromSeed(c.Replicas[1].PrivateKey)
	for i := range 20 {
		m := &bft.Prepare{View: uint64(i), Seq: uint64(i * i), Digest: bft.Digest{byte(i)}, Replica: 1}
		msg := wire.SignedBytes(nil, m)
		sig := a.Sign(m)
		if want := ed25519.Sign(priv, msg); !bytes.Equal(sig, want) {
			t.Fatalf("message %d: signature %x, crypto/ed25519 signs %x", i, sig, want)
		}
		flipped := bytes.Clone(sig)
		flipped[i%len(flipped)] ^= 1 << (i % 8)
		unreduced := bytes.Clone(sig)
		addL(unreduced[32:])
		for _, tc := range []struct {
			name string
			id   bft.ReplicaID
			sig  []byte
		}{
			{"valid", 1, sig},
			{"flipped bit", 1, flipped},
			{"S+L", 1, unreduced},
			{"another replica's key", 2, sig},
			{"truncated", 1, sig[:63]},
		} {
			want := len(tc.sig) == ed25519.SignatureSize && ed25519.Verify(ed25519.PublicKey(c.Replicas[tc.id].PublicKey), msg, tc.sig)
			if got := a.Verify(tc.id, m, tc.sig); got != want {
				t.Fatalf("message %d, %s: Verify = %v, crypto/ed25519 says %v", i, tc.name, got, want)
			}
			if tc.name == "valid" != want {
				t.Fatalf("message %d, %s: crypto/ed25519 says %v", i, tc.name, want)
			}
		}
	}
}

// addL adds the order of the Ed25519 group, L = 2^252 +
// 27742317777372353535851937790883648493, to the little-endian s.
func addL(s []byte) {
	l := [32]byte{0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde, 0x14,
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10}
	carry := 0
	for i := range s {
		v := int(s[i]) + int(l[i]) + carry
		s[i], carry = byte(v), v>>8
	}
}

// BenchmarkSignature measures ReplicaAuth's Sign and Verify beside
// crypto/ed25519's on the same signed bytes, in one run:
//
//	go test -run '^$' -bench Signature ./bft/auth
func BenchmarkSignature(b *testing.B) {
	c := generate(b, 4, 1)
	a, err := NewReplicaAuth(c, 1)
	if err != nil {
		b.Fatal(err)
	}
	m := &bft.Prepare{View: 3, Seq: 1234, Digest: bft.Digest{1, 2, 3}, Replica: 1}
	msg := wire.SignedBytes(nil, m)
	priv := ed25519.NewKeyFromSeed(c.Replicas[1].PrivateKey)
	pub := ed25519.PublicKey(c.Replicas[1].PublicKey)
	sig := a.Sign(m)
	b.Run("sign/ours", func(b *testing.B) {
		for b.Loop() {
			a.Sign(m)
		}
	})
	b.Run("sign/crypto-ed25519", func(b *testing.B) {
		for b.Loop() {
			ed25519.Sign(priv, msg)
		}
	})
	b.Run("verify/ours", func(b *testing.B) {
		for b.Loop() {
			if !a.Verify(1, m, sig) {
				b.Fatal("rejected")
			}
		}
	})
	b.Run("verify/crypto-ed25519", func(b *testing.B) {
		for b.Loop() {
			if !ed25519.Verify(pub, msg, sig) {
				b.Fatal("rejected")
			}
		}
	})
}
