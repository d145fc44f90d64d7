// Package soak holds the soak test of issue 14 (soak_test.go): the built
// binary (`mailroom serve`) under mixed load for a set time — pushes and
// mailbox changes on several Gmail accounts, form submissions in bursts,
// rule saves, injected Google faults and quota refusals — killed with
// SIGKILL and restarted every 20 to 60 s, and on the external-Redis
// variant also a Redis restarted without persistence and a FLUSHALL.
// After a drain it checks that nothing was lost or doubled and prints what
// it survived.
//
// `make soak` runs it for SOAK_DURATION (default 10m) on each broker;
// `make test` runs the CI version: 2 minutes of load on each broker, in
// parallel (`go test -short` skips it).
// SOAK_SEED replays a run's schedule of kills, faults and load.
//
// The package has no code outside its tests.
package soak
