package queue

import "testing"

// A task the relay marked in flight whose enqueue has not returned may not
// be in the broker's lists yet: the queues' figures count it as the
// outbox's until the broker has it, so that it is never in neither count
// (a caller polling GET /api/v1/queues for idle saw new mail's task
// nowhere for that instant).
func TestTaskOnItsWayToTheBrokerCountsAsTheOutboxs(t *testing.T) {
	r := newRelay(nil, "q")
	r.inflight["a"], r.inflight["b"] = struct{}{}, struct{}{}
	r.enqueuing["b"] = struct{}{}
	if got := r.handedOver(); got != 1 {
		t.Errorf("handed over %d, want 1 (b's enqueue has not returned)", got)
	}
	if got := r.backlog(); got != 2 {
		t.Errorf("backlog %d, want 2: both are in flight for the relay's cap and the servers", got)
	}
	r.done("b") // a fast worker finished it before its enqueue returned
	if len(r.enqueuing) != 0 || r.handedOver() != 1 {
		t.Errorf("after b finished: enqueuing %v, handed over %d; want none and 1", r.enqueuing, r.handedOver())
	}
}
