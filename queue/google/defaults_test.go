package google

import "testing"

// TestZeroBudgetConfigTakesTheExportedDefaults: the exported defaults,
// which serve's flag table reads, are the ones a zero BudgetConfig takes.
func TestZeroBudgetConfigTakesTheExportedDefaults(t *testing.T) {
	var c BudgetConfig
	c.defaults()
	if c.UserUnits != MustPrices(DefaultPrices).UserUnitsPerMinute || c.ProjectUnits != DefaultProjectUnitsPerMinute || c.Window != DefaultWindow {
		t.Errorf("UserUnits, ProjectUnits, Window = %d, %d, %v; want %d, %d, %v",
			c.UserUnits, c.ProjectUnits, c.Window, MustPrices(DefaultPrices).UserUnitsPerMinute, DefaultProjectUnitsPerMinute, DefaultWindow)
	}
}
