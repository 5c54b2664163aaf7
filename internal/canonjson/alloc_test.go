package canonjson

import "runtime"

// allocatedPerByte runs fn a few times and returns the heap bytes it
// allocated per run, per byte of src.
func allocatedPerByte(src []byte, fn func()) float64 {
	const runs = 2
	fn() // warm up
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		fn()
	}
	runtime.ReadMemStats(&after)
	return float64(after.TotalAlloc-before.TotalAlloc) / runs / float64(len(src))
}
