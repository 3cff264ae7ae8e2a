//go:build !race

package upstream_test

// raceEnabled: see race_test.go.
const raceEnabled = false
