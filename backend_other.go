//go:build !linux

package rubin

// openBackend opens the transport cfg names. The selector needs Linux:
// elsewhere a "tcp" Stack carries package net's connections, and other
// transports fail with their ErrNotSupported.
func openBackend(cfg Config, g *guard) (backend, error) {
	if cfg.Transport == "tcp" {
		return newNetStack(g), nil
	}
	s, err := newStack(cfg, g)
	if err != nil {
		return nil, err
	}
	return s, nil
}
