package rubin

// NewNetStack makes the "tcp" Stack of package net's connections that
// serves where the selector is not supported, so that it is tested here.
func NewNetStack() *Stack {
	s, err := openStack(Config{Transport: "tcp"}.normalized(), func(_ Config, g *guard) (backend, error) {
		return newNetStack(g), nil
	})
	if err != nil {
		panic(err)
	}
	return s
}
