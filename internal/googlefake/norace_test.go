//go:build !race

package googlefake_test

const raceEnabled = false
