package app_test

import (
	"errors"
	"fmt"
	"io"
	"mailroom/internal/app"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
)

// smallFS mounts a tmpfs of the given size (for example "8m") on a temp
// dir and returns it. Mounting needs root (CAP_SYS_ADMIN): without it the
// test is skipped loudly, or fails under CI=true.
func smallFS(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput()
	if err != nil {
		msg := fmt.Sprintf("cannot mount a small tmpfs (%v: %s): the disk-full test did NOT run (it needs root; CI=true makes this fatal)", err, strings.TrimSpace(string(out)))
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		fmt.Fprintf(os.Stderr, "--- %s: %s\n", t.Name(), msg)
		t.Skip(msg)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// fillDisk writes a file until the file system is full and returns its path.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill the disk: %v", err)
			}
			break
		}
	}
	// The last bytes a page at a time, so that not even a page is left.
	for _, err := f.Write(chunk[:4096]); err == nil; _, err = f.Write(chunk[:4096]) {
	}
	for _, err := f.Write(chunk[:1]); err == nil; _, err = f.Write(chunk[:1]) {
	}
	return path
}

// TestDiskFull runs the appliance on a small file system and fills it:
// submissions answer 503 store_unavailable with Retry-After (and nothing is
// acknowledged that was not stored), /readyz fails and an alert is raised;
// when space returns it recovers by itself, and every accepted row reaches
// its sheet once, in order.
func TestDiskFull(t *testing.T) {
	if testing.Short() {
		t.Skip("mounts a file system")
	}
	dataDir := smallFS(t, "8m")
	var mu sync.Mutex
	var alerts []string
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		mu.Lock()
		alerts = append(alerts, string(raw))
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(hook.Close)
	alerted := func(s string) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, a := range alerts {
			if strings.Contains(a, s) {
				return true
			}
		}
		return false
	}
	fake := googlefake.StartForTest(t, googlefake.Options{SheetsWriteLimit: 1000})
	ta, userID, accountID, book := sheetsApp(t, fake, func(cfg *app.Config) {
		cfg.DataDir = dataDir
		cfg.AlertWebhookURL = hook.URL
		cfg.SheetsFlushDelay = 100 * time.Millisecond
		cfg.SheetsWritesPerMinute = 1000
	})
	var form sheetsForm
	ta.JSON(http.MethodPost, "/api/v1/forms", map[string]any{
		"userId": userID, "accountId": accountID, "spreadsheetId": book, "sheet": "Responses", "columns": []string{"n"},
	}, http.StatusCreated, &form)

	var accepted []string
	n := 0
	// submit posts one submission and returns the answer.
	submit := func() *http.Response {
		n++
		req, _ := http.NewRequest(http.MethodPost, ta.URL+"/api/v1/forms/"+form.ID+"/submissions",
			jsonBody(t, map[string]any{"answers": map[string]string{"n": fmt.Sprint(n)}}))
		req.Header.Set("Authorization", "Bearer "+ta.Token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		switch resp.StatusCode {
		case http.StatusAccepted:
			var got struct{ ID string }
			if err := jsonUnmarshal(raw, &got); err != nil {
				t.Fatal(err)
			}
			accepted = append(accepted, got.ID)
		case http.StatusServiceUnavailable:
			if !jsonHasCode(raw, "store_unavailable") {
				t.Fatalf("503 %s, want code store_unavailable", raw)
			}
		default:
			t.Fatalf("submission: %d %s; want 202 or 503", resp.StatusCode, raw)
		}
		return resp
	}
	readyz := func() int {
		resp, err := http.Get(ta.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	rowsIn := func() int { rows, _ := fake.Sheets.Rows(book, "Responses"); return len(rows) }

	for range 50 {
		submit()
	}
	testkit.Eventually(t, 30*time.Second, "the first rows", func() bool { return rowsIn() == 50 })

	filler := fillDisk(t, dataDir)
	var refused *http.Response
	for range 5000 {
		if resp := submit(); resp.StatusCode == http.StatusServiceUnavailable {
			refused = resp
			break
		}
	}
	if refused == nil {
		t.Fatalf("5,000 submissions accepted on a full disk")
	}
	if ra := refused.Header.Get("Retry-After"); ra == "" || ra == "0" {
		t.Fatalf("503 without Retry-After (%q)", ra)
	}
	full := len(accepted)
	for range 20 {
		if resp := submit(); resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("a submission answered %d on a full disk after a 503", resp.StatusCode)
		}
	}
	if readyz() != http.StatusServiceUnavailable {
		t.Fatal("/readyz is not 503 on a full disk")
	}
	testkit.Eventually(t, 10*time.Second, "the alert", func() bool { return alerted("cannot be written") })
	if len(ta.Problems()) == 0 {
		t.Fatal("the overview shows no problem on a full disk")
	}
	t.Logf("disk full after %d accepted submissions", full)

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "/readyz to recover", func() bool { return readyz() == http.StatusOK })
	testkit.Eventually(t, 10*time.Second, "the all-clear alert", func() bool { return alerted("can be written again") })
	for range 50 {
		if resp := submit(); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("submission after space returned: %d", resp.StatusCode)
		}
	}
	testkit.Eventually(t, 60*time.Second, "every accepted row in the sheet", func() bool { return rowsIn() >= len(accepted) })
	// Records of tasks that finished while the disk was full leave the
	// outbox too.
	testkit.Eventually(t, 10*time.Second, "an empty outbox", func() bool {
		var q struct {
			Queues []struct{ Outbox, Pending int } `json:"queues"`
		}
		ta.JSON(http.MethodGet, "/api/v1/queues", nil, http.StatusOK, &q)
		for _, x := range q.Queues {
			if x.Outbox+x.Pending > 0 {
				return false
			}
		}
		return true
	})
	rows, _ := fake.Sheets.Rows(book, "Responses")
	if len(rows) != len(accepted) {
		t.Fatalf("%d rows for %d accepted submissions", len(rows), len(accepted))
	}
	for i, r := range rows {
		if id := r[len(r)-1]; id != accepted[i] {
			t.Fatalf("row %d holds %s, want %s (each accepted submission once, in order)", i+1, id, accepted[i])
		}
	}
}
