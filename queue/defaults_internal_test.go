package queue

import "testing"

// TestZeroConfigTakesTheExportedDefaults: the exported defaults, which
// serve's flag table reads, are the ones a zero Config takes.
func TestZeroConfigTakesTheExportedDefaults(t *testing.T) {
	var c Config
	c.defaults()
	for _, d := range []struct {
		name      string
		got, want any
	}{
		{"RelayCap", c.RelayCap, DefaultRelayCap},
		{"RelayWorkers", c.RelayWorkers, DefaultRelayWorkers},
		{"RetryInitial", c.RetryInitial, DefaultRetryInitial},
		{"RetryMultiplier", c.RetryMultiplier, float64(DefaultRetryMultiplier)},
		{"RetryMax", c.RetryMax, DefaultRetryMax},
		{"PollInterval", c.PollInterval, DefaultPollInterval},
		{"DelayedCheckInterval", c.DelayedCheckInterval, DefaultDelayedCheckInterval},
		{"ShutdownTimeout", c.ShutdownTimeout, DefaultShutdownTimeout},
		{"ServerLinger", c.ServerLinger, DefaultServerLinger},
		{"ReconcileInterval", c.ReconcileInterval, DefaultReconcileInterval},
	} {
		if d.got != d.want {
			t.Errorf("%s = %v, want %v", d.name, d.got, d.want)
		}
	}
}
