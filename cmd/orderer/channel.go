package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/rubin-go/rubin/order/block"
	"github.com/rubin-go/rubin/order/envelope"
)

// channelFile is the channel's configuration that keygen writes beside
// the cluster file.
type channelFile struct {
	Channel string `json:"channel"`
	// Writers and Readers are the policies' CA certificates, PEM.
	Writers string `json:"writers"`
	Readers string `json:"readers"`
	// MaxMessageCount to BatchTimeout configure block cutting.
	MaxMessageCount   int    `json:"max_message_count"`
	AbsoluteMaxBytes  int    `json:"absolute_max_bytes"`
	PreferredMaxBytes int    `json:"preferred_max_bytes"`
	BatchTimeout      string `json:"batch_timeout"`
	// Broadcast[i] is where orderer i serves AtomicBroadcast.
	Broadcast []string `json:"broadcast"`
}

// channelPath is the channel file beside a cluster file.
func channelPath(cluster string) string {
	return strings.TrimSuffix(cluster, ".json") + ".channel.json"
}

func (c *channelFile) save(path string) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o600)
}

// channel is a channel file made ready for use.
type channel struct {
	file             channelFile
	writers, readers *envelope.Policy
	block            block.Config
}

func loadChannel(path string) (*channel, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c := &channel{}
	if err := json.Unmarshal(b, &c.file); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if c.writers, err = envelope.NewPolicy([]byte(c.file.Writers)); err != nil {
		return nil, fmt.Errorf("%s: writers: %w", path, err)
	}
	if c.readers, err = envelope.NewPolicy([]byte(c.file.Readers)); err != nil {
		return nil, fmt.Errorf("%s: readers: %w", path, err)
	}
	timeout, err := time.ParseDuration(c.file.BatchTimeout)
	if err != nil {
		return nil, fmt.Errorf("%s: batch_timeout: %w", path, err)
	}
	c.block = block.Config{MaxMessageCount: c.file.MaxMessageCount, AbsoluteMaxBytes: c.file.AbsoluteMaxBytes, PreferredMaxBytes: c.file.PreferredMaxBytes, BatchTimeout: timeout}
	if c.file.Channel == "" {
		return nil, fmt.Errorf("%s: no channel name", path)
	}
	return c, nil
}
