package cli

import (
	"fmt"
	"net"
	"strings"
)

// Addrs parses the value of a flag that lists HOST:PORT addresses, one
// per party in order, separated by commas; an empty value is no list.
// A malformed or repeated address is a usage error naming the flag.
func Addrs(flag, value string) ([]string, error) {
	if value == "" {
		return nil, nil
	}
	list := strings.Split(value, ",")
	seen := make(map[string]bool, len(list))
	for _, a := range list {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("%w: -%s: %w", ErrUsage, flag, err)
		}
		if seen[a] {
			return nil, fmt.Errorf("%w: -%s: %s is named twice", ErrUsage, flag, a)
		}
		seen[a] = true
	}
	return list, nil
}
