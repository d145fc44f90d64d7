package sheets

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
		{"FlushDelay", c.FlushDelay, DefaultFlushDelay},
		{"Threshold", c.Threshold, DefaultThreshold},
		{"WritesPerMinute", c.WritesPerMinute, DefaultWritesPerMinute},
		{"ReadsPerMinute", c.ReadsPerMinute, DefaultReadsPerMinute},
		{"ProjectWritesPerMinute", c.ProjectWritesPerMinute, DefaultProjectWritesPerMinute},
		{"ProjectReadsPerMinute", c.ProjectReadsPerMinute, DefaultProjectReadsPerMinute},
		{"QuotaWindow", c.QuotaWindow, DefaultQuotaWindow},
		{"CallTimeout", c.CallTimeout, DefaultCallTimeout},
		{"RecheckMax", c.RecheckMax, DefaultRecheckMax},
		{"MaxWaiting", c.MaxWaiting, DefaultMaxWaiting},
		{"BrokerTick", c.BrokerTick, DefaultBrokerTick},
		{"SubmitsPerForm", c.SubmitsPerForm, DefaultSubmitsPerForm},
		{"SubmitsPerUser", c.SubmitsPerUser, DefaultSubmitsPerUser},
		{"SubmitWindow", c.SubmitWindow, DefaultSubmitWindow},
	} {
		if d.got != d.want {
			t.Errorf("%s = %v, want %v", d.name, d.got, d.want)
		}
	}
}
