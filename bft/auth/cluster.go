// Package auth holds a PBFT cluster's keys and implements
// bft.Authenticator with them.
//
// # Keys
//
// Every replica has an Ed25519 key pair: it signs the messages other
// replicas forward as proof (pre-prepares, prepares, checkpoints, view
// changes, new views). Every pair of replicas shares a random 32-byte
// key, and so does every client with every replica. Those pairwise keys
// are never used directly: purposes get keys derived from them with
// HKDF-SHA256 and distinct labels, so that a MAC computed for one
// purpose can never pass for another.
//
//   - A client's request authenticator uses the key derived with label
//     "rubin/v1/request" from the key the client shares with each replica
//     (see ClientAuth and ReplicaAuth.VerifyRequest).
//   - The link layer's handshake uses LinkKey and ClientLinkKey, derived
//     with labels "rubin/v1/replica-link" and "rubin/v1/client-link".
//
// # Configuration files
//
// A Cluster is the configuration of the whole cluster, stored as JSON
// (keys in base64) by Save and read by Load. Generate makes one as a
// trusted dealer would: the result holds every secret of every party.
// That is fine for a test cluster on one machine or in one
// administrator's hands, but in a real deployment no machine should hold
// another's secrets: give each replica the file ForReplica makes for it,
// and each client the one ForClient makes; they keep every address and
// public key and only their holder's secrets. A party that speaks for
// several clients (a gateway of the coordination service) keeps the file
// ForClients makes for it: those clients' keys and nothing else. A
// replica that also speaks as clients of its own (an orderer orders
// through two client identities) keeps the file ForReplica makes for it
// with those clients named: its secrets and those clients' keys. Load
// accepts those stripped files (the Holder field says whose secrets a
// file holds) and checks that they hold exactly their holder's secrets.
package auth

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/rubin-go/rubin/bft"
)

// KeySize is the size of a pairwise key, shared by two replicas or by a
// client and a replica.
const KeySize = 32

// Cluster is a cluster's configuration: its replicas, with their
// addresses and keys, and its clients with theirs.
type Cluster struct {
	// F is the number of faulty replicas tolerated; there are 3F+1.
	F int `json:"f"`
	// Replicas is indexed by replica ID: Replicas[i].ID == i.
	Replicas []Replica `json:"replicas"`
	// Clients holds the clients, in any order, with unique IDs.
	Clients []Client `json:"clients"`
	// Holder says whose secrets the configuration holds: nil for a
	// dealer's configuration with everyone's, else the one party made
	// by ForReplica, ForClient or ForClients.
	Holder *Holder `json:"holder,omitempty"`
}

// Replica is one replica's entry in a Cluster.
type Replica struct {
	ID bft.ReplicaID `json:"id"`
	// Addr is where the replica listens, host:port.
	Addr string `json:"addr"`
	// PublicKey is the replica's Ed25519 public key.
	PublicKey []byte `json:"public_key"`
	// PrivateKey is the replica's Ed25519 seed (32 bytes, see
	// ed25519.NewKeyFromSeed); absent in files for other parties.
	PrivateKey []byte `json:"private_key,omitempty"`
	// MACKeys[j] is the key this replica shares with replica j: the
	// same bytes as Replicas[j].MACKeys[i]. The replica's own entry is
	// empty. Absent in files for other parties.
	MACKeys [][]byte `json:"mac_keys,omitempty"`
}

// Client is one client's entry in a Cluster.
type Client struct {
	ID bft.ClientID `json:"id"`
	// Keys[r] is the key this client shares with replica r. In a file
	// for replica r, only Keys[r] is present; in a file for another
	// client, none is.
	Keys [][]byte `json:"keys,omitempty"`
}

// Holder names the one party whose secrets a stripped configuration
// holds: a replica, a client, a party holding several clients' keys, or
// a replica that also holds the keys of clients of its own.
type Holder struct {
	Client bool   `json:"client,omitempty"` // ID is a ClientID, not a ReplicaID
	ID     uint64 `json:"id"`
	// Clients, if not empty, makes the holder a party with these
	// clients' keys, in increasing order (ForClients); Client and ID are
	// unset then, unless Replica is set.
	Clients []bft.ClientID `json:"clients,omitempty"`
	// Replica, set only with Clients, makes the holder replica ID that
	// also holds those clients' keys (ForReplica with clients named).
	Replica bool `json:"replica,omitempty"`
}

func (h *Holder) String() string {
	switch {
	case h == nil:
		return "the dealer"
	case h.Replica:
		return fmt.Sprintf("replica %d with %s", h.ID, clientList(h.Clients))
	case len(h.Clients) > 0:
		return "the holder of " + clientList(h.Clients)
	case h.Client:
		return fmt.Sprintf("client %d", h.ID)
	default:
		return fmt.Sprintf("replica %d", h.ID)
	}
}

// clientList names the clients ids, in increasing order, for a message.
func clientList(ids []bft.ClientID) string {
	if len(ids) == 0 {
		return "no clients"
	}
	first, last := ids[0], ids[len(ids)-1]
	switch {
	case len(ids) == 1:
		return fmt.Sprintf("client %d", first)
	case len(ids) == 2:
		return fmt.Sprintf("clients %d and %d", first, last)
	case uint64(last-first) == uint64(len(ids)-1):
		return fmt.Sprintf("clients %d-%d", first, last)
	default:
		return fmt.Sprintf("%d clients from %d to %d", len(ids), first, last)
	}
}

// replica reports whether the holder is a replica, with or without
// clients of its own.
func (h *Holder) replica() bool { return h != nil && !h.Client && (len(h.Clients) == 0 || h.Replica) }

// forClients reports whether the holder is a client or holds clients'
// keys only, rather than a replica or the dealer.
func (h *Holder) forClients() bool { return h != nil && !h.replica() }

// holdsClient reports whether the holder is, or holds the keys of,
// client id.
func (h *Holder) holdsClient(id bft.ClientID) bool {
	if h == nil {
		return true
	}
	if h.Client {
		return h.ID == uint64(id)
	}
	_, found := slices.BinarySearch(h.Clients, id)
	return found
}

// N returns the number of replicas.
func (c *Cluster) N() int { return len(c.Replicas) }

// Generate makes the configuration of a cluster of n = 3f+1 replicas
// (n ≥ 4) and the given number of clients, with IDs 0 to clients-1, as a
// trusted dealer: every key comes from rand (crypto/rand.Reader if nil)
// and the result holds every secret. Replica i listens on
// host:basePort+i.
func Generate(n, clients int, host string, basePort int, rand io.Reader) (*Cluster, error) {
	if n < 4 || (n-1)%3 != 0 {
		return nil, fmt.Errorf("auth: generate: %d replicas: want 3f+1 with f ≥ 1 (4, 7, 10, ...)", n)
	}
	if clients < 0 {
		return nil, fmt.Errorf("auth: generate: %d clients", clients)
	}
	if basePort < 1 || basePort+n-1 > 65535 {
		return nil, fmt.Errorf("auth: generate: ports %d to %d: out of range", basePort, basePort+n-1)
	}
	if rand == nil {
		rand = cryptoRand
	}
	key := func() ([]byte, error) {
		k := make([]byte, KeySize)
		if _, err := io.ReadFull(rand, k); err != nil {
			return nil, fmt.Errorf("auth: generate: reading randomness: %w", err)
		}
		return k, nil
	}
	c := &Cluster{F: (n - 1) / 3, Replicas: make([]Replica, n), Clients: make([]Client, clients)}
	for i := range c.Replicas {
		seed, err := key()
		if err != nil {
			return nil, err
		}
		r := &c.Replicas[i]
		r.ID = bft.ReplicaID(i)
		r.Addr = net.JoinHostPort(host, strconv.Itoa(basePort+i))
		r.PublicKey = ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
		r.PrivateKey = seed
		r.MACKeys = make([][]byte, n)
	}
	for i := range n {
		for j := i + 1; j < n; j++ {
			k, err := key()
			if err != nil {
				return nil, err
			}
			c.Replicas[i].MACKeys[j] = k
			c.Replicas[j].MACKeys[i] = bytes.Clone(k)
		}
	}
	for i := range c.Clients {
		cl := &c.Clients[i]
		cl.ID = bft.ClientID(i)
		cl.Keys = make([][]byte, n)
		for r := range cl.Keys {
			k, err := key()
			if err != nil {
				return nil, err
			}
			cl.Keys[r] = k
		}
	}
	return c, nil
}

var cryptoRand = rand.Reader

// Load reads a configuration that Save wrote, a dealer's or a stripped
// one, and validates it (see Validate).
func Load(path string) (*Cluster, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth: load: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields() // a misspelt field would silently be a missing key
	var c Cluster
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("auth: load %s: %w", path, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("auth: load %s: data after the configuration", path)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("auth: load %s: %w", path, err)
	}
	return &c, nil
}

// Save validates c and writes it to path as indented JSON, readable only
// by its owner (mode 0600): it holds secrets. It writes a temporary file
// and renames it, so a reader never sees half a configuration and an
// existing file's looser mode is not kept.
func (c *Cluster) Save(path string) error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("auth: save %s: %w", path, err)
	}
	data, err := json.MarshalIndent(c, "", "\t")
	if err != nil {
		return fmt.Errorf("auth: save %s: %w", path, err)
	}
	data = append(data, '\n')
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("auth: save: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // fails harmlessly after the rename
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("auth: save: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("auth: save: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("auth: save: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("auth: save: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("auth: save: %w", err)
	}
	return nil
}

// SaveEach writes into dir, with Save, one stripped configuration per
// party: replica-<id>.json from ForReplica for every replica and
// client-<id>.json from ForClient for every client. This is the
// deployment counterpart of saving the dealer's configuration: each file
// goes to its own machine. c must be the dealer's configuration.
func (c *Cluster) SaveEach(dir string) error {
	if c.Holder != nil {
		return fmt.Errorf("auth: save each: %s's configuration lacks the others' secrets", c.Holder)
	}
	if err := c.SaveReplicas(dir, nil); err != nil {
		return err
	}
	for _, cl := range c.Clients {
		s, err := c.ForClient(cl.ID)
		if err != nil {
			return err
		}
		if err := s.Save(filepath.Join(dir, fmt.Sprintf("client-%d.json", cl.ID))); err != nil {
			return err
		}
	}
	return nil
}

// SaveReplicas writes into dir, with Save, replica-<id>.json from
// ForReplica for every replica: the files SaveEach writes for them. If
// own is not nil, replica id's file also holds the keys of the clients
// own(id) names: the clients it speaks as.
func (c *Cluster) SaveReplicas(dir string, own func(bft.ReplicaID) []bft.ClientID) error {
	for i := range c.Replicas {
		var clients []bft.ClientID
		if own != nil {
			clients = own(bft.ReplicaID(i))
		}
		s, err := c.ForReplica(bft.ReplicaID(i), clients...)
		if err != nil {
			return err
		}
		if err := s.Save(filepath.Join(dir, fmt.Sprintf("replica-%d.json", i))); err != nil {
			return err
		}
	}
	return nil
}

// holdsReplica reports whether the configuration must hold replica i's
// secrets.
func (c *Cluster) holdsReplica(i int) bool {
	return c.Holder == nil || c.Holder.replica() && c.Holder.ID == uint64(i)
}

// HoldsReplica reports whether c holds replica id's secrets, to act as
// it: c is the dealer's configuration or replica id's own.
func (c *Cluster) HoldsReplica(id bft.ReplicaID) bool {
	return uint64(id) < uint64(len(c.Replicas)) && c.holdsReplica(int(id))
}

// HoldsClient reports whether c holds client id's keys, to act as it:
// c is the dealer's configuration, or its holder is or speaks as client
// id.
func (c *Cluster) HoldsClient(id bft.ClientID) bool {
	return c.client(id) != nil && c.Holder.holdsClient(id)
}

// Validate checks the configuration: n = 3F+1 replicas with IDs equal to
// their index, addresses that parse and differ, keys of the right sizes,
// a symmetric matrix of replica keys, unique client IDs, and that the
// configuration holds exactly its Holder's secrets.
func (c *Cluster) Validate() error {
	n := len(c.Replicas)
	if c.F < 1 {
		return fmt.Errorf("f = %d: want at least 1", c.F)
	}
	if n != 3*c.F+1 {
		return fmt.Errorf("%d replicas: want 3f+1 = %d for f = %d", n, 3*c.F+1, c.F)
	}
	if h := c.Holder; h != nil {
		switch {
		case h.Replica && h.Client:
			return errors.New("holder: a replica and a client at once")
		case h.Replica && len(h.Clients) == 0:
			return errors.New("holder: a replica with clients of its own names none")
		case len(h.Clients) > 0 && !h.Replica && (h.Client || h.ID != 0):
			return errors.New("holder: names clients and one party too")
		case len(h.Clients) > 0 && !slices.IsSorted(h.Clients):
			return errors.New("holder: clients out of order")
		case len(h.Clients) > 0 && len(slices.Compact(slices.Clone(h.Clients))) != len(h.Clients):
			return errors.New("holder: a client named twice")
		case h.replica() && h.ID >= uint64(n):
			return fmt.Errorf("holder: no replica %d", h.ID)
		}
	}
	addrs := make(map[string]int, n)
	for i := range c.Replicas {
		r := &c.Replicas[i]
		if r.ID != bft.ReplicaID(i) {
			return fmt.Errorf("replica at index %d has ID %d: a replica's ID is its index", i, r.ID)
		}
		// Any host will do (it is resolved when dialing); the port
		// must be a number, not a service name.
		_, port, err := net.SplitHostPort(r.Addr)
		if err != nil {
			return fmt.Errorf("replica %d: address: %w", i, err)
		}
		if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
			return fmt.Errorf("replica %d: address %q: port %q: want 1 to 65535", i, r.Addr, port)
		}
		if j, dup := addrs[r.Addr]; dup {
			return fmt.Errorf("replica %d: address %q: already replica %d's", i, r.Addr, j)
		}
		addrs[r.Addr] = i
		if len(r.PublicKey) != ed25519.PublicKeySize {
			return fmt.Errorf("replica %d: public key: %d bytes, want %d", i, len(r.PublicKey), ed25519.PublicKeySize)
		}
		if !c.holdsReplica(i) {
			if len(r.PrivateKey) != 0 || len(r.MACKeys) != 0 {
				return fmt.Errorf("replica %d: holds the replica's secret keys, but the configuration is %s's", i, c.Holder)
			}
			continue
		}
		if len(r.PrivateKey) != ed25519.SeedSize {
			return fmt.Errorf("replica %d: private key: %d bytes, want a %d-byte seed", i, len(r.PrivateKey), ed25519.SeedSize)
		}
		pub := ed25519.NewKeyFromSeed(r.PrivateKey).Public().(ed25519.PublicKey)
		if !bytes.Equal(pub, r.PublicKey) {
			return fmt.Errorf("replica %d: the private key does not match the public key", i)
		}
		if len(r.MACKeys) != n {
			return fmt.Errorf("replica %d: %d MAC keys, want one per replica (%d)", i, len(r.MACKeys), n)
		}
		for j, k := range r.MACKeys {
			if j == i {
				if len(k) != 0 {
					return fmt.Errorf("replica %d: MAC key with itself: want none", i)
				}
				continue
			}
			if len(k) != KeySize {
				return fmt.Errorf("replica %d: MAC key for replica %d: %d bytes, want %d", i, j, len(k), KeySize)
			}
			// Check symmetry once per pair, when both rows are here.
			if j < i && c.holdsReplica(j) && !bytes.Equal(k, c.Replicas[j].MACKeys[i]) {
				return fmt.Errorf("replicas %d and %d: their MAC keys for each other differ", j, i)
			}
		}
	}
	ids := make(map[bft.ClientID]bool, len(c.Clients))
	heldClients := 0
	h := c.Holder
	for i := range c.Clients {
		cl := &c.Clients[i]
		if ids[cl.ID] {
			return fmt.Errorf("client %d: duplicate ID", cl.ID)
		}
		ids[cl.ID] = true
		held := h.holdsClient(cl.ID) // every key of the client is here
		switch {
		case !held && h.forClients():
			// Another client's file: no key of this client.
			if len(cl.Keys) != 0 {
				return fmt.Errorf("client %d: holds the client's keys, but the configuration is %s's", cl.ID, h)
			}
			continue
		case held && h != nil:
			heldClients++
		}
		if len(cl.Keys) != n {
			return fmt.Errorf("client %d: %d keys, want one per replica (%d)", cl.ID, len(cl.Keys), n)
		}
		for r, k := range cl.Keys {
			if held || c.holdsReplica(r) {
				if len(k) != KeySize {
					return fmt.Errorf("client %d: key for replica %d: %d bytes, want %d", cl.ID, r, len(k), KeySize)
				}
			} else if len(k) != 0 {
				return fmt.Errorf("client %d: holds its key for replica %d, but the configuration is %s's", cl.ID, r, h)
			}
		}
	}
	switch {
	case h != nil && h.Client && heldClients == 0:
		return fmt.Errorf("holder: no client %d", h.ID)
	case h != nil && len(h.Clients) > heldClients:
		return fmt.Errorf("holder: %d of its %d clients are not in the configuration", len(h.Clients)-heldClients, len(h.Clients))
	}
	return nil
}

// publicReplicas copies the replicas without their secrets.
func (c *Cluster) publicReplicas() []Replica {
	rs := make([]Replica, len(c.Replicas))
	for i, r := range c.Replicas {
		rs[i] = Replica{ID: r.ID, Addr: r.Addr, PublicKey: bytes.Clone(r.PublicKey)}
	}
	return rs
}

func cloneKeys(ks [][]byte) [][]byte {
	if ks == nil {
		return nil
	}
	out := make([][]byte, len(ks))
	for i, k := range ks {
		out[i] = bytes.Clone(k)
	}
	return out
}

// ForReplica returns a copy of c for replica id to keep: every address
// and public key, and only replica id's secrets (its private key, its
// keys with the other replicas, and each client's key with it). If
// clients are named, the copy also holds their keys, for a replica that
// speaks as those clients too (an orderer orders through two client
// identities of its own), and nothing more of any other client. c must
// hold those secrets: be the dealer's or replica id's own with those
// clients.
func (c *Cluster) ForReplica(id bft.ReplicaID, clients ...bft.ClientID) (*Cluster, error) {
	n := len(c.Replicas)
	if uint64(id) >= uint64(n) {
		return nil, fmt.Errorf("auth: no replica %d in a cluster of %d", id, n)
	}
	if !c.holdsReplica(int(id)) {
		return nil, fmt.Errorf("auth: replica %d's secrets are not in %s's configuration", id, c.Holder)
	}
	h := &Holder{ID: uint64(id)}
	if len(clients) > 0 {
		ids, err := c.heldClients(clients)
		if err != nil {
			return nil, err
		}
		h.Clients, h.Replica = ids, true
	}
	s := &Cluster{F: c.F, Replicas: c.publicReplicas(), Clients: make([]Client, len(c.Clients)), Holder: h}
	own, r := &s.Replicas[id], &c.Replicas[id]
	own.PrivateKey = bytes.Clone(r.PrivateKey)
	own.MACKeys = cloneKeys(r.MACKeys)
	for i, cl := range c.Clients {
		keys := make([][]byte, n)
		switch {
		case h.holdsClient(cl.ID):
			keys = cloneKeys(cl.Keys)
		case int(id) < len(cl.Keys):
			keys[id] = bytes.Clone(cl.Keys[id])
		}
		s.Clients[i] = Client{ID: cl.ID, Keys: keys}
	}
	return s, nil
}

// ForClient returns a copy of c for client id to keep: every replica's
// address and public key, and only the client's keys. Other clients are
// left out. c must hold the client's keys: be the dealer's or the
// client's own.
func (c *Cluster) ForClient(id bft.ClientID) (*Cluster, error) {
	s, err := c.ForClients([]bft.ClientID{id})
	if err != nil {
		return nil, err
	}
	s.Holder = &Holder{Client: true, ID: uint64(id)}
	return s, nil
}

// ForClients returns a copy of c for a party that speaks for the clients
// ids (a gateway): every replica's address and public key, and only those
// clients' keys. Other clients are left out. c must hold those keys: be
// the dealer's configuration or hold them all.
func (c *Cluster) ForClients(ids []bft.ClientID) (*Cluster, error) {
	if len(ids) == 0 {
		return nil, errors.New("auth: for clients: no client named")
	}
	ids, err := c.heldClients(ids)
	if err != nil {
		return nil, err
	}
	s := &Cluster{F: c.F, Replicas: c.publicReplicas(), Holder: &Holder{Clients: ids}}
	for _, id := range ids {
		s.Clients = append(s.Clients, Client{ID: id, Keys: cloneKeys(c.client(id).Keys)})
	}
	return s, nil
}

// heldClients returns ids sorted, each once, or an error if c does not
// hold the keys of one of them.
func (c *Cluster) heldClients(ids []bft.ClientID) ([]bft.ClientID, error) {
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	for _, id := range ids {
		if !c.Holder.holdsClient(id) {
			return nil, fmt.Errorf("auth: client %d's keys are not in %s's configuration", id, c.Holder)
		}
		if c.client(id) == nil {
			return nil, fmt.Errorf("auth: no client %d", id)
		}
	}
	return ids, nil
}

func (c *Cluster) client(id bft.ClientID) *Client {
	for i := range c.Clients {
		if c.Clients[i].ID == id {
			return &c.Clients[i]
		}
	}
	return nil
}

// Key derivation labels: one per purpose of the pairwise keys.
const (
	labelRequest     = "rubin/v1/request"
	labelReplicaLink = "rubin/v1/replica-link"
	labelClientLink  = "rubin/v1/client-link"
)

// derive returns the key for one purpose of a pairwise key. The pairwise
// keys are uniformly random, so HKDF's extract step is unnecessary and
// they serve directly as the pseudorandom key of HKDF-Expand.
func derive(key []byte, label string) []byte {
	k, err := hkdf.Expand(sha256.New, key, label, KeySize)
	if err != nil {
		panic("auth: hkdf: " + err.Error()) // only for lengths; ours are fixed
	}
	return k
}

// LinkKey returns the key replicas a and b use to authenticate their
// link, derived from the key they share; LinkKey(a, b) == LinkKey(b, a).
// It returns nil if a == b, if either is not a replica, or if c does not
// hold the pair's key (a stripped file holds only its replica's pairs):
// the caller must treat nil as "no link".
func (c *Cluster) LinkKey(a, b bft.ReplicaID) []byte {
	n := uint64(len(c.Replicas))
	if a == b || uint64(a) >= n || uint64(b) >= n {
		return nil
	}
	if k := c.Replicas[a].MACKeys; int(b) < len(k) && len(k[b]) == KeySize {
		return derive(k[b], labelReplicaLink)
	}
	if k := c.Replicas[b].MACKeys; int(a) < len(k) && len(k[a]) == KeySize {
		return derive(k[a], labelReplicaLink)
	}
	return nil
}

// ClientLinkKey returns the key client and replica use to authenticate
// their link, derived from the key they share. It returns nil if c does
// not hold that key.
func (c *Cluster) ClientLinkKey(client bft.ClientID, replica bft.ReplicaID) []byte {
	k := c.clientKey(client, replica)
	if k == nil {
		return nil
	}
	return derive(k, labelClientLink)
}

func (c *Cluster) clientKey(client bft.ClientID, replica bft.ReplicaID) []byte {
	cl := c.client(client)
	if cl == nil || uint64(replica) >= uint64(len(cl.Keys)) || len(cl.Keys[replica]) != KeySize {
		return nil
	}
	return cl.Keys[replica]
}
