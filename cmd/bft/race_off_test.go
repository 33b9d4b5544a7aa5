//go:build !race

package main

// raceDetector reports whether the test binary runs under the race
// detector, which multiplies memory use by 5 to 10.
const raceDetector = false
