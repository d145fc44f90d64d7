package queue_test

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"mailroom/queue"
)

// TestNewTableRefusesBadRows: the table is assembled from the pipelines'
// rows, so building it is where a duplicate, a prefix (asynq's mux
// matches by prefix) or a row without a queue or workers is refused.
func TestNewTableRefusesBadRows(t *testing.T) {
	t.Parallel()
	row := func(name, q string, workers int) queue.TaskType {
		return queue.TaskType{Name: name, Queue: q, Concurrency: workers, Timeout: time.Minute}
	}
	for _, c := range []struct {
		name string
		rows [][]queue.TaskType
		want string
	}{
		{"duplicate across pipelines", [][]queue.TaskType{{row("a:x", "a", 1)}, {row("a:x", "b", 1)}}, "duplicate task type a:x"},
		{"prefix", [][]queue.TaskType{{row("a:x", "a", 1)}, {row("a:x-more", "b", 1)}}, "a:x is a prefix of a:x-more"},
		{"no queue", [][]queue.TaskType{{row("a:x", "", 1)}}, "needs a name and a queue"},
		{"no workers", [][]queue.TaskType{{row("a:x", "a", 0)}}, "concurrency must be at least 1"},
	} {
		if _, err := queue.NewTable(c.rows...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: NewTable = %v, want an error containing %q", c.name, err, c.want)
		}
	}
	table, err := queue.NewTable([]queue.TaskType{row("a:x", "a", 1)}, nil, []queue.TaskType{row("b:y", "a", 3)})
	if err != nil {
		t.Fatal(err)
	}
	if err := table.Validate(); err == nil || !strings.Contains(err.Error(), "has no handler") {
		t.Errorf("Validate without handlers = %v, want a missing handler", err)
	}
	for _, name := range []string{"a:x", "b:y"} {
		if err := table.Handle(name, func(context.Context, *queue.Task) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if err := table.Validate(); err != nil {
		t.Fatal(err)
	}
	if qs := table.Queues(); len(qs) != 1 || qs[0].Concurrency != 3 || strings.Join(qs[0].Types, ",") != "a:x,b:y" {
		t.Errorf("Queues = %+v, want one queue a of a:x and b:y, 3 workers", qs)
	}
}

// TestEngineImportsNoPipeline: the engine (this package) knows no domain:
// of the packages under queue/, it depends on none but its own broker.
func TestEngineImportsNoPipeline(t *testing.T) {
	t.Parallel()
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(goTool, "list", "-deps", "-f", "{{.ImportPath}}", "mailroom/queue").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	engine := map[string]bool{"mailroom/queue": true, "mailroom/queue/broker": true}
	var deps []string
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "mailroom/queue/") || p == "mailroom/queue" {
			deps = append(deps, p)
			if !engine[p] {
				t.Errorf("the engine depends on %s, a package of the domain", p)
			}
		}
	}
	if len(deps) == 0 {
		t.Fatalf("go list named no package under queue/ (not even the engine): %q", out)
	}
}

// TestEngineNamesNoTaskType: no source file of the engine spells a
// pipeline's task type; each pipeline declares its own rows.
func TestEngineNamesNoTaskType(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			v, _ := strconv.Unquote(lit.Value)
			for _, domain := range []string{"gmail:", "rules:", "sheets:", "webhooks:", "debug:"} {
				if strings.HasPrefix(v, domain) {
					t.Errorf("%s: the engine names the task type %q", fset.Position(lit.Pos()), v)
				}
			}
			return true
		})
	}
}
