package google

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// The adapter speaks no task engine's language: queue/google imports
// nothing of ours but store (DESIGN.md, the rooms), and above all not the
// engine, mailroom/queue, whose error classes the pipelines map to.
func TestImportsNoEngine(t *testing.T) {
	t.Parallel()
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	pkgs := strings.Fields(string(out))
	if len(pkgs) == 0 || pkgs[len(pkgs)-1] != "mailroom/queue/google" {
		t.Fatalf("go list -deps did not end with the package itself: %q", out)
	}
	for _, pkg := range pkgs[:len(pkgs)-1] {
		if strings.HasPrefix(pkg, "mailroom/") && pkg != "mailroom/store" {
			t.Errorf("queue/google depends on %s; it may import nothing of ours but mailroom/store", pkg)
		}
	}
}
