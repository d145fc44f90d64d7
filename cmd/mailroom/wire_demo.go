package main

import "context"

// wireDemo builds the demo pipeline: its handlers in the task table, its loops
// and its web extension.
func (a *app) wireDemo(ctx context.Context) error {
	return nil
}
