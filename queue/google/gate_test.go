package google

import (
	"context"
	"errors"
	"testing"

	"mailroom/internal/googlefake"
	"mailroom/queue/broker/brokertest"
)

// A write call passes its gate once its quota is granted and holds what
// the gate gave until Gmail has answered; a gate's error ends the call
// unmade, as it is; reads pass no gate.
func TestWriteGate(t *testing.T) {
	ctx := WithPriority(context.Background(), PriorityLive)
	fake := googlefake.StartForTest(t, googlefake.Options{})
	const ann = "ann@example.com"
	refresh := fake.AddAccount(ann)
	id, err := fake.Gmail.AddMessage(ann, googlefake.Message{From: "a@example.org", Subject: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	gm := budgetedGmail(t, fake, refresh, BudgetConfig{})
	var passed, released int
	open := WithWriteGate(ctx, func(context.Context) (func(), error) {
		passed++
		return func() {
			if fake.Calls(googlefake.MethodMessagesBatchModify) != 1 {
				t.Error("released before the call was made")
			}
			released++
		}, nil
	})
	if _, _, err := gm.ListMessages(open, "", 10); err != nil {
		t.Fatal(err)
	}
	if passed != 0 {
		t.Errorf("a read passed the write gate %d times", passed)
	}
	if err := gm.BatchModify(open, []string{id}, []string{"STARRED"}, nil); err != nil {
		t.Fatal(err)
	}
	if passed != 1 || released != 1 {
		t.Errorf("a write passed the gate %d times and released it %d times, want once each", passed, released)
	}
	shut := errors.New("superseded")
	closed := WithWriteGate(ctx, func(context.Context) (func(), error) { return nil, shut })
	if err := gm.BatchModify(closed, []string{id}, nil, []string{"STARRED"}); !errors.Is(err, shut) {
		t.Errorf("a closed gate's call: %v, want its error", err)
	}
	if n := fake.Calls(googlefake.MethodMessagesBatchModify); n != 1 {
		t.Errorf("%d batchModify calls reached Gmail, want 1 (the closed gate's is not made)", n)
	}
}

// budgetedGmail is the Gmail API of the emulator's account with refresh
// token refresh, through a client whose budget is cfg over an embedded
// broker.
func budgetedGmail(t *testing.T, fake *googlefake.Server, refresh string, cfg BudgetConfig) *Gmail {
	t.Helper()
	bud, err := NewBudget(cfg, brokertest.Embedded(t).Client())
	if err != nil {
		t.Fatal(err)
	}
	c := New(Config{APIURL: fake.URL(), TokenURL: fake.TokenURL(), ReadRetries: -1, Budget: bud})
	gm, err := c.Gmail(WithPriority(context.Background(), PriorityLive), "acc-1", c.TokenSource(Token{RefreshToken: refresh}, nil))
	if err != nil {
		t.Fatal(err)
	}
	return gm
}
