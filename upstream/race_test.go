//go:build race

package upstream_test

// raceEnabled: the test binary runs under the race detector, and so does the
// provider process it builds.
const raceEnabled = true
