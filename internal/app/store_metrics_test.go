package app_test

import (
	"mailroom/internal/app/apptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mailroom/store"
)

// /metrics gives the data file's size and free space from the first
// scrape, and the overview shows them.
func TestStoreFileMetrics(t *testing.T) {
	t.Parallel()
	ta := apptest.Start(t, nil)
	st, err := os.Stat(filepath.Join(ta.Config().DataDir, store.FileName))
	if err != nil {
		t.Fatal(err)
	}
	m := scrapeMetrics(ta)
	size, ok := m["mailroom_store_file_bytes"]
	if !ok || size != float64(st.Size()) {
		t.Fatalf("mailroom_store_file_bytes = %v (%v), the file has %d bytes", size, ok, st.Size())
	}
	if free, ok := m["mailroom_store_free_bytes"]; !ok || free < 0 || free > size {
		t.Fatalf("mailroom_store_free_bytes = %v (%v)", free, ok)
	}
	if page := adminGet(t, ta, "/admin"); !strings.Contains(page, "Data file:") || !strings.Contains(page, "MiB, of which") {
		t.Fatal("the overview does not show the data file's size")
	}
}
