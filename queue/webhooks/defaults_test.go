package webhooks

import "testing"

// TestZeroConfigTakesTheExportedDefaults: DefaultMaxAge, which serve's
// flag table reads, is the one a zero Config takes.
func TestZeroConfigTakesTheExportedDefaults(t *testing.T) {
	var c Config
	c.defaults()
	if c.MaxAge != DefaultMaxAge {
		t.Errorf("MaxAge = %v, want %v", c.MaxAge, DefaultMaxAge)
	}
}
