package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// gatewaysFile shares a cluster's client identities out among its
// gateways: coord keygen -gateways N writes it beside the cluster file,
// and coord gateway -gateway I takes entry I's identities. Each gateway
// then has its own; the replicas refuse a gateway a claim of identities
// another running gateway holds.
type gatewaysFile struct {
	Gateways []gatewayEntry `json:"gateways"`
}

type gatewayEntry struct {
	Gateway int    `json:"gateway"`
	IDs     string `json:"ids"` // first-last, as -ids takes them
}

// gatewaysPath is where the gateways file of a cluster file goes.
func gatewaysPath(cluster string) string {
	return strings.TrimSuffix(cluster, ".json") + ".gateways.json"
}

// shareOut gives each of n gateways a range of the client identities 0
// to clients-1, as even as can be.
func shareOut(n, clients int) gatewaysFile {
	var f gatewaysFile
	for i := range n {
		f.Gateways = append(f.Gateways, gatewayEntry{Gateway: i, IDs: fmt.Sprintf("%d-%d", i*clients/n, (i+1)*clients/n-1)})
	}
	return f
}

func (f gatewaysFile) save(path string) error {
	b, err := json.MarshalIndent(f, "", "\t")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// loadGateways reads a gateways file; a missing one is no error: its
// cluster's gateways share nothing out (nil).
func loadGateways(path string) (*gatewaysFile, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var f gatewaysFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for i, g := range f.Gateways {
		if g.Gateway != i {
			return nil, fmt.Errorf("%s: entry %d is gateway %d", path, i, g.Gateway)
		}
	}
	return &f, nil
}

// gatewayIDs chooses the -ids of a gateway: spec if given, else the
// range of gateway (if not -1) in the gateways file beside the cluster
// file, else every identity ("") if that file shares them out among
// fewer than two gateways.
func gatewayIDs(cluster, spec string, gateway int) (string, error) {
	if spec != "" && gateway >= 0 {
		return "", fmt.Errorf("%w: give -ids or -gateway, not both", errUsage)
	}
	if spec != "" {
		return spec, nil
	}
	path := gatewaysPath(cluster)
	f, err := loadGateways(path)
	if err != nil {
		return "", err
	}
	switch {
	case gateway >= 0 && f == nil:
		return "", fmt.Errorf("%w: -gateway %d: no %s (coord keygen -gateways N writes it)", errUsage, gateway, path)
	case gateway >= 0 && gateway >= len(f.Gateways):
		return "", fmt.Errorf("%w: -gateway %d: %s lists %d gateways", errUsage, gateway, path, len(f.Gateways))
	case gateway >= 0:
		return f.Gateways[gateway].IDs, nil
	case f != nil && len(f.Gateways) > 1:
		return "", fmt.Errorf("%w: %s shares the client identities out among %d gateways: choose one with -gateway I", errUsage, path, len(f.Gateways))
	}
	return "", nil
}
