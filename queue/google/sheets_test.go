package google

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"mailroom/queue"
	"mailroom/queue/google/googlefake"
)

// The Sheets adapter shares the Gmail adapter's call rules: a 401 refreshes
// the token and tries again, a second 401 reports the grant revoked.
func TestSheetsRefreshesThenReportsARevokedGrant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fake := googlefake.StartForTest(t, googlefake.Options{})
	const ann = "ann@example.com"
	refresh := fake.AddAccount(ann)
	book, err := fake.Sheets.CreateSpreadsheet(ann, "Forms", "Sheet1")
	if err != nil {
		t.Fatal(err)
	}
	c := New(Config{APIURL: fake.URL(), TokenURL: fake.TokenURL(), ReadRetries: -1})
	ts := c.TokenSource(Token{RefreshToken: refresh}, nil)
	var revoked atomic.Int32
	ts.OnRevoked(func(error) { revoked.Add(1) })
	sh, err := c.Sheets(ctx, ts)
	if err != nil {
		t.Fatal(err)
	}
	row := [][]string{{"a", "b"}}

	if _, err := fake.InjectFault(googlefake.Fault{Method: googlefake.MethodValuesUpdate, Code: 401, Times: 1}); err != nil {
		t.Fatal(err)
	}
	if err := sh.WriteRange(ctx, book, "Sheet1!A1:B1", row); err != nil || revoked.Load() != 0 {
		t.Fatalf("after one 401: %v, %d revoked reports; want the write through a new token", err, revoked.Load())
	}

	if _, err := fake.InjectFault(googlefake.Fault{Method: googlefake.MethodValuesUpdate, Code: 401, Times: 2}); err != nil {
		t.Fatal(err)
	}
	err = sh.WriteRange(ctx, book, "Sheet1!A2:B2", row)
	if !errors.Is(err, ErrRevoked) || !queue.IsPermanent(err) {
		t.Errorf("after two 401s: %v, want permanent ErrRevoked", err)
	}
	if n := revoked.Load(); n != 1 {
		t.Errorf("%d revoked reports, want 1", n)
	}
}
