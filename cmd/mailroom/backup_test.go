package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"mailroom/internal/app"
	"mailroom/internal/app/apptest"
	"mailroom/internal/demo"
	"mailroom/internal/testkit"
	"mailroom/store"
)

// A backup taken through the API while the demo runs is a consistent bbolt
// file that holds the latest submission; `mailroom backup` (run by the
// test in process) fetches the same copy from the running server.
func TestBackupWhileDemoRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo")
	}
	ta := apptest.Start(t, func(c *app.Config) { c.Demo, c.DemoScale, c.SheetsFlushDelay = true, 0.02, 300*time.Millisecond }, demo.Prepare)
	var forms struct {
		Forms []struct {
			ID string `json:"id"`
		} `json:"forms"`
	}
	testkit.Eventually(t, 30*time.Second, "the demo's forms", func() bool {
		status, raw := ta.Do(http.MethodGet, "/api/v1/forms", nil)
		return status == http.StatusOK && json.Unmarshal(raw, &forms) == nil && len(forms.Forms) > 0
	})
	// Submit with the form's own columns.
	var sub struct {
		ID string `json:"id"`
	}
	var form struct {
		Columns []string `json:"columns"`
	}
	ta.JSON(http.MethodGet, "/api/v1/forms/"+forms.Forms[0].ID, nil, http.StatusOK, &form)
	answers := map[string]any{}
	for _, c := range form.Columns {
		answers[c] = "backup probe"
	}
	ta.JSON(http.MethodPost, "/api/v1/forms/"+forms.Forms[0].ID+"/submissions", map[string]any{"answers": answers}, http.StatusAccepted, &sub)

	// Through the API.
	req, _ := http.NewRequest(http.MethodGet, ta.URL+"/api/v1/backup", nil)
	req.Header.Set("Authorization", "Bearer "+ta.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/v1/backup: %s", resp.Status)
	}
	dir := t.TempDir()
	copyPath := filepath.Join(dir, "api.db")
	f, err := os.Create(copyPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		t.Fatal(err)
	}
	f.Close()
	checkBackupHolds(t, copyPath, sub.ID)

	// Through the command, which finds the file locked and asks the server.
	out := filepath.Join(dir, "cli.db")
	var stdout bytes.Buffer
	env := map[string]string{"MAILROOM_DATA_DIR": ta.Config().DataDir, "MAILROOM_API_TOKEN": ta.Token}
	err = backupCommand(context.Background(), []string{"--out", out, "--url", ta.URL}, func(k string) string { return env[k] }, &stdout, io.Discard)
	if err != nil {
		t.Fatalf("mailroom backup: %v", err)
	}
	checkBackupHolds(t, out, sub.ID)
}

func checkBackupHolds(t *testing.T, path, submissionID string) {
	t.Helper()
	if err := store.Verify(path); err != nil {
		t.Fatalf("backup %s: %v", path, err)
	}
	dir := t.TempDir()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, store.FileName), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(dir, store.Options{SecretKey: make([]byte, 32)})
	if err != nil {
		t.Fatalf("open backup: %v", err)
	}
	defer db.Close()
	err = db.View(func(tx *store.Tx) error {
		_, err := tx.SubmissionGet(submissionID)
		return err
	})
	if err != nil {
		t.Fatalf("backup %s lacks the latest submission %s: %v", path, submissionID, err)
	}
}
