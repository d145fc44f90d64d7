package google

import "context"

// WriteGate is passed by a Gmail write call just before it goes out: after
// its quota units were granted (a wait for quota holds nothing) and before
// it takes one of the account's in-flight slots. It returns what to call
// once the call has returned, or an error that ends the call unmade (the
// call returns that error as it is).
//
// The rules pipeline gates its label writes with it, so that two writes of
// one label of an account are never in flight together and a write whose
// change a newer one replaced while it waited for quota is not made: Gmail
// takes calls that are in flight together in any order, and an older
// change landing after a newer one would stay.
type WriteGate func(ctx context.Context) (release func(), err error)

type writeGateKey struct{}

// WithWriteGate returns ctx whose Gmail write calls pass gate.
func WithWriteGate(ctx context.Context, gate WriteGate) context.Context {
	return context.WithValue(ctx, writeGateKey{}, gate)
}

// pass passes ctx's write gate, if any.
func pass(ctx context.Context) (release func(), err error) {
	gate, _ := ctx.Value(writeGateKey{}).(WriteGate)
	if gate == nil {
		return func() {}, nil
	}
	return gate(ctx)
}
