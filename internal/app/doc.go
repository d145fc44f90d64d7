// Package app is mailroom's composition root: the configuration (every
// setting a flag with a MAILROOM_* environment twin, validated once, plus
// the Overrides no flag reaches) and the one constructor, New, that opens
// the store and the broker, builds the task table, the queue, the Google
// accounts, the rules, Gmail and Sheets pipelines (one wire_*.go file
// each) and the web handler. Start starts the task servers, the
// pipelines' loops and the HTTP server; Stop stops them in reverse.
//
// serve, serve --demo, the end-to-end and crash tests and every benchmark
// build the appliance through New, so they run the same app. An Option
// (the demo world, internal/demo, is one) adds to the app while New
// builds it; app imports neither the demo nor the benchmarks.
package app
