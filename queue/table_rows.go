package queue

// NewTableFromRows builds a table from rows, such as NewTable's Types()
// regrouped into other queues (the Gmail isolation benchmark puts every
// Gmail event type in one queue as its baseline). Handlers may be set on
// the rows or later with Handle; Validate checks the result.
func NewTableFromRows(rows []TaskType) *Table {
	return &Table{rows: append([]TaskType(nil), rows...)}
}
