package simnet

import "github.com/rubin-go/rubin/bft"

// Disk is what a replica with Config.Persist made durable, as its driver
// would: the latest snapshot and the records persisted since.
type Disk struct {
	Snapshot *bft.Snapshot
	Records  []bft.Record
	// Synced counts the leading Records that a sync made durable: those
	// up to the last Ready with Persist records, which a driver syncs
	// with every Deferred record it held before them.
	Synced int
}

// store persists a Ready's records to replica i's disk, before its
// messages go out; the deferred ones too (LoseCommitted drops those not
// synced yet at Recover).
func (n *Net) store(i int, rd *bft.Ready) {
	if n.Disks == nil {
		n.Disks = make([]Disk, n.N)
	}
	d := &n.Disks[i]
	persists := d.Snapshot != nil || len(d.Records) > 0 // Config.Persist
	if n.Check != nil && persists && !n.Faulty[i] && rd.Snapshot == nil && len(rd.Persist) == 0 {
		for _, e := range rd.Messages {
			if c, ok := e.Msg.(*bft.Checkpoint); ok {
				// Its signature vouches for a state only the records
				// up to it rebuild: they must be synced first.
				n.Check.fail("replica %d sends its checkpoint at %d before a sync", i, c.Seq)
				break
			}
		}
	}
	if rd.Snapshot != nil {
		d.Snapshot, d.Records, d.Synced = rd.Snapshot, nil, 0
	}
	d.Records = append(d.Records, rd.Persist...)
	if len(rd.Persist) > 0 {
		d.Synced = len(d.Records)
	}
	d.Records = append(d.Records, rd.Deferred...)
}

// Recover replaces replica i by a fresh one that recovers from its disk,
// as after a crash of the process (a power loss) with its storage intact;
// it is no longer crashed.
func (n *Net) Recover(i int) error {
	if err := n.Restart(i); err != nil {
		return err
	}
	if n.Disks == nil {
		return nil
	}
	d := n.Disks[i]
	if n.Check != nil && n.Now > 0 {
		n.Note("replica %d recovers from its disk", i)
	}
	if n.LoseCommitted {
		// The crash lost every record not synced: the Deferred ones
		// (committed slots, votes) since the last Ready with Persist
		// records, which a driver writes and syncs with those.
		d.Records = d.Records[:d.Synced:d.Synced]
		n.Disks[i] = d
	}
	return n.Replicas[i].Recover(d.Snapshot, d.Records)
}
