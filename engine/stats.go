package engine

// Stats returns the Block's snapshot: its models (Models).
func (b *Block) Stats() Stats { return Stats{Models: b.Models()} }
