package canonjson

// blocks is an append-only list kept in blocks of blockLen elements, so that
// growing it copies no more than the first block: its memory is its length
// plus at most one block, where a slice grown by append can take five times
// its length in allocations.
type blocks[T any] struct {
	b [][]T
	n int
}

const blockLen = 1024

func (l *blocks[T]) push(v T) {
	i := l.n / blockLen
	if i == len(l.b) {
		var b []T // the first block grows by append: small texts need little
		if i > 0 {
			b = make([]T, 0, blockLen)
		}
		l.b = append(l.b, b)
	}
	l.b[i] = append(l.b[i], v)
	l.n++
}

func (l *blocks[T]) at(i int) *T { return &l.b[i/blockLen][i%blockLen] }

// grow appends v to s, doubling its capacity when it is full; append alone
// grows large slices by 1.25×, which allocates five times the final length.
func grow[T any](s []T, v T) []T {
	if len(s) == cap(s) {
		bigger := make([]T, len(s), max(2*cap(s), 4))
		copy(bigger, s)
		s = bigger
	}
	return append(s, v)
}
