package gmail

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
		{"PollInterval", c.PollInterval, DefaultPollInterval},
		{"FastPollInterval", c.FastPollInterval, DefaultFastPollInterval},
		{"TrailingRead", c.TrailingRead, DefaultTrailingRead},
		{"WatchRenew", c.WatchRenew, DefaultWatchRenew},
		{"TombstoneRetention", c.TombstoneRetention, DefaultTombstoneRetention},
		{"HistoryPageSize", c.HistoryPageSize, DefaultHistoryPageSize},
		{"FullSyncWorkers", c.FullSyncWorkers, DefaultFullSyncWorkers},
		{"FullSyncSlice", c.FullSyncSlice, DefaultFullSyncSlice},
		{"GoogleTimeout", c.GoogleTimeout, DefaultGoogleTimeout},
	} {
		if d.got != d.want {
			t.Errorf("%s = %v, want %v", d.name, d.got, d.want)
		}
	}
}
