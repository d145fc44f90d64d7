package bench

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	binaryOnce sync.Once
	binaryPath string
	binaryErr  error
)

// buildBinary builds the mailroom command once per test run: a scenario's
// helper processes (the Google emulator child) run it.
func buildBinary(t testing.TB) string {
	t.Helper()
	binaryOnce.Do(func() {
		dir, err := os.MkdirTemp("", "mailroom-bin-")
		if err != nil {
			binaryErr = err
			return
		}
		binaryPath = filepath.Join(dir, "mailroom")
		out, err := exec.Command("go", "build", "-o", binaryPath, "mailroom/cmd/mailroom").CombinedOutput()
		if err != nil {
			binaryErr = err
			binaryPath = string(out)
		}
	})
	if binaryErr != nil {
		t.Fatalf("build mailroom: %v\n%s", binaryErr, binaryPath)
	}
	return binaryPath
}
