// Package app is mailroom's composition root: the configuration (every
// setting a flag with a MAILROOM_* environment twin, validated once: only
// what an operator sets) and the one constructor, New, that opens the
// store and the broker, assembles the task table from the pipelines' rows,
// builds the queue, the Google
// accounts, the rules, Gmail and Sheets pipelines (one wire_*.go file
// each) and the web handler. Start starts the task servers, the
// pipelines' loops and the HTTP server; Stop stops them in reverse.
//
// serve, serve --demo, the end-to-end and crash tests and every benchmark
// build the appliance through New, so they run the same app. What a
// program embedding the app adds (the demo world's services, a
// benchmark's own task types or its Gmail quota off) comes in Deps,
// made before New; app imports neither the demo nor the benchmarks.
package app
