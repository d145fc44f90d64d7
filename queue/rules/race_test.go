//go:build race

package rules

// raceEnabled: the race detector makes sync.Pool drop items, so regexp
// allocates its machines again and allocation counts mean nothing.
const raceEnabled = true
