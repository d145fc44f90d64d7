//go:build race

package googlefake_test

// raceEnabled shrinks the large tests under the race detector, which slows
// them about tenfold.
const raceEnabled = true
