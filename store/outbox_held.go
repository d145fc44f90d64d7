package store

// OutboxKeyHeld reports whether a live record of queue holds key, without
// decoding it: a cheap check for producers that only need to know whether
// their task is already waiting (the sheets pipeline asks it on every
// submission).
func (tx *Tx) OutboxKeyHeld(queue, key string) bool {
	held := tx.tx.Bucket(bucketOutboxKeys).Get([]byte(key))
	if held == nil {
		return false
	}
	seq, err := Seq(string(held))
	if err != nil {
		return false
	}
	b, _ := outboxQueue(tx.tx, queue, false)
	return b != nil && b.Get(u64(seq)) != nil
}
