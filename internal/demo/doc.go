// Package demo is the world of `mailroom serve --demo`: the in-process
// Google emulator (internal/googlefake) on a loopback port with every
// Google setting pointed at it, its seed (a user with a work and a
// personal Gmail account, a third account the consent flow signs in as,
// two spreadsheets fed by two forms, three label rules), shortened
// default timings, alerts caught in process, the traffic generator that
// keeps mail and submissions arriving, and the demo-only admin pages'
// view of the emulated Google. Option adds it all to the app as
// app.New builds it; cmd adds the option only with --demo.
package demo
