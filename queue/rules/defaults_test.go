package rules

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
		{"Debounce", c.Debounce, DefaultDebounce},
		{"MaxWait", c.MaxWait, DefaultMaxWait},
		{"Tick", c.Tick, DefaultTick},
		{"BatchSize", c.BatchSize, DefaultBatchSize},
		{"SaveLimit", c.SaveLimit, DefaultSaveLimit},
		{"SaveWindow", c.SaveWindow, DefaultSaveWindow},
		{"PublishPerTick", c.PublishPerTick, DefaultPublishPerTick},
		{"BodyFetchers", c.BodyFetchers, DefaultBodyFetchers},
		{"GmailCalls", c.GmailCalls, DefaultGmailCalls},
		{"WriteDelay", c.WriteDelay, DefaultWriteDelay},
	} {
		if d.got != d.want {
			t.Errorf("%s = %v, want %v", d.name, d.got, d.want)
		}
	}
}
