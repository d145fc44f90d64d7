package main

import "context"

// wireGmail builds the gmail pipeline: its handlers in the task table, its loops
// and its web extension.
func (a *app) wireGmail(ctx context.Context) error {
	return nil
}
