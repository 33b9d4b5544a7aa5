package benchkit

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// SplitList splits a comma-separated flag value, dropping empty items and
// duplicates.
func SplitList(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item != "" && !slices.Contains(out, item) {
			out = append(out, item)
		}
	}
	return out
}

// ParseInts parses the comma-separated integers of flag -name, each at
// least least, sorted.
func ParseInts(name, s string, least int) ([]int, error) {
	var out []int
	for _, item := range SplitList(s) {
		v, err := strconv.Atoi(item)
		if err != nil || v < least {
			return nil, fmt.Errorf("-%s: %q is not an integer of at least %d", name, item, least)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-%s is empty", name)
	}
	slices.Sort(out)
	return out, nil
}
