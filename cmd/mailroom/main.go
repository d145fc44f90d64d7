// Command mailroom is the background-job appliance: one binary with an
// embedded broker, bbolt, the task servers and the admin web page.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// A second signal forces exit.
		<-ctx.Done()
		stop()
		force := make(chan os.Signal, 1)
		signal.Notify(force, os.Interrupt, syscall.SIGTERM)
		<-force
		fmt.Fprintln(os.Stderr, "mailroom: second signal, exiting now")
		os.Exit(130)
	}()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "mailroom: %v\n", err)
		os.Exit(exitCode(err))
	}
}
