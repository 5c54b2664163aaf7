package canonjson

import (
	"crypto/sha256"
	"runtime"
	"sort"
	"testing"
)

// BenchmarkFingerprint canonicalises hostile shapes of about 1 MiB (deep
// nesting and the payment body are as large as they come) into a SHA-256, as
// the server's fingerprint does, with this package (Stream) and with the
// implementation it replaced (Reference). alloc-B/body-B is the heap
// allocated per byte of the text.
func BenchmarkFingerprint(b *testing.B) {
	shapes := hostileShapes(1 << 20)
	names := make([]string, 0, len(shapes))
	for name := range shapes {
		names = append(names, name)
	}
	sort.Strings(names)
	impls := []struct {
		name string
		run  func(b *testing.B, src []byte)
	}{
		{"Stream", func(b *testing.B, src []byte) {
			d, err := Parse(src, nil)
			if err != nil {
				b.Fatal(err)
			}
			h := sha256.New()
			if _, err := d.WriteTo(h); err != nil {
				b.Fatal(err)
			}
		}},
		{"Reference", func(b *testing.B, src []byte) {
			out, err := referenceCanonical(src)
			if err != nil {
				b.Fatal(err)
			}
			h := sha256.New()
			h.Write(out)
		}},
	}
	for _, name := range names {
		src := shapes[name]
		for _, impl := range impls {
			b.Run(name+"/"+impl.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(src)))
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				for b.Loop() {
					impl.run(b, src)
				}
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N)/float64(len(src)), "alloc-B/body-B")
			})
		}
	}
}
