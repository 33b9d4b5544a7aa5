package rubin

// openBackend opens the transport cfg names, served by selectors.
func openBackend(cfg Config, g *guard) (backend, error) {
	s, err := newStack(cfg, g)
	if err != nil {
		return nil, err
	}
	return s, nil
}
