// TestApp: the .NET process that eventpipe-rs traces in its real-runtime tests.
//
// Build: mcs -unsafe -out:TestApp.exe TestApp.cs   (ci/dotnet.sh does this, plus the
//        TestApp.runtimeconfig.json that lets one exe run on .NET Core 3.1 and .NET 8)
// Run:   dotnet TestApp.exe SECONDS   SECONDS may be fractional; 0 or "forever" = until killed
//        dotnet TestApp.exe heap SECONDS   the known heap below, then idle (no events)
//        dotnet TestApp.exe counters SECONDS   the known counters below, then idle
//
// Stdout: "pid N" and "runtime X" first (flushed), then at the end
//         "done iterations=N exceptions=E gc0=A gc1=B gc2=C".
// Stderr: "progress I" once iteration I has written its events, for every I % 100 == 0:
//         how far the app has got, so a test can run its session until the app has done
//         enough work rather than for a fixed time a throttled machine may not honour.
// Exit code 0; 2 on a bad argument.
//
// ---------------------------------------------------------------------------------------
// EVENTS. Provider "EventPipeRs-Test" (EventSource; its GUID is the name-derived one).
// The main loop runs iterations i = 0, 1, ..., N-1 (N = the "iterations" of the summary);
// iteration i writes events 1..8 once each, in id order, all from the main thread, and
// event 9 too when i % 100 == 0. Then it sleeps 1 ms (about 800 iterations/s here).
// In the formulas i is a 64-bit integer, (int)i its low 32 bits, b(x) = (byte)(x & 0xff).
// Doubles are IEEE binary64 computed exactly as written (correctly rounded, same in Rust).
// Payload wire layout = the fields in order, little-endian, no padding:
//   int = i32, long = i64, double = f64, Guid = 16 bytes (u32 a, u16 b, u16 c, 8 bytes),
//   enum = its underlying i32, string = UTF-16LE + a 0x0000 terminator,
//   byte[] = u32 length + the bytes.
//
// Keywords: Numbers = 0x1, Text = 0x2, Binary = 0x4, Misc = 0x8.
// Levels:   Warning = 3, Informational = 4, Verbose = 5.
//
// id name      keyword level fields (type Name = value at iteration i)
// 1  Ints      Numbers 4     int Iter = (int)i
//                            int Negative = -(int)i - 1
//                            int Max = int.MaxValue (2147483647)
//                            int Min = int.MinValue (-2147483648)
// 2  Longs     Numbers 4     long Iter = i
//                            long Min = long.MinValue (-9223372036854775808)
//                            long Max = long.MaxValue (9223372036854775807)
//                            long Scaled = i * 1000000007 - 5000000000
// 3  Doubles   Numbers 5     int Iter = (int)i
//                            double Quarter = i + 0.25
//                            double Third = i / 3.0
//                            double Negative = -1.0 - 1.5 * i
// 4  Text      Text    4     int Iter = (int)i
//                            string Message = "iter " + i + " h\u00e9llo w\u00f6rld \u4e16\u754c \U0001F980"
//                                (decimal i, invariant; i.e. "iter 7 héllo wörld 世界 🦀",
//                                 the crab being a surrogate pair D83E DD80)
//                            string Empty = "" (on the wire: just the 2-byte terminator)
// 5  Blob      Binary  4     long Iter = i
//                            byte[] Data: length i % 17 (0..16), Data[k] = b(i + k)
// 6  Ident     Misc    4     int Iter = (int)i
//                            Guid Id = new Guid((int)i, 0x0102, 0x0304, 5, 6, 7, 8, 9, 10, 11, b(i))
//                                text "{(uint)i:x8}-0102-0304-0506-0708090a0b{b(i):x2}",
//                                wire: (int)i LE, 02 01, 04 03, 05 06 07 08 09 0a 0b b(i)
// 7  Choice    Misc    3     int Iter = (int)i
//                            Color Color = [Red, Green, Blue][i % 3] = [1, 2, 4][i % 3]
// 8  Mixed     Misc    4     int Iter = (int)i
//                            long Square = i * i
//                            double Half = i / 2.0
//                            string Name = "n" + i            (e.g. "n42")
//                            Guid Id = the Guid of event 6
//                            Color Color = the Color of event 7
//                            (written through WriteEvent(id, params object[]); all the others
//                             through WriteEventCore or a typed WriteEvent overload)
// 9  Heartbeat Misc    4     no fields, only when i % 100 == 0 (so ceil(N / 100) of them)
//
// Metadata as these runtimes (3.1.23, 8.0.4) emit it over EventPipe: event names and field
// names as above; TypeCodes int32 = 9, int64 = 11, double = 14, string = 18, Guid = 17, and an
// enum field as its underlying int32 (9). Event 5 (it has a byte[]) is described with an EMPTY
// field list although its payload is there (i64 + u32 length + bytes). The keywords in the
// metadata carry EventSource's session bits too: 0xF00000000000 | the keyword above.
// No event declares a version, opcode or task (EventSource defaults apply).
//
// Side activity for runtime-provider tests:
// - every iteration allocates 200 byte arrays of 16..4111 bytes (a 20000-array ring keeps some
//   alive: gen0 and gen1 GCs happen all the time);
// - every 50th iteration (i % 50 == 0) allocates a 120000-byte array (large object heap);
// - every 1000th iteration with i > 0 calls GC.Collect() (an induced gen2 GC);
// - every 10th iteration (i % 10 == 0) throws and catches
//   InvalidOperationException("TestApp exception " + i) (the summary's "exceptions").
//
// HEAP MODE ("heap SECONDS"): builds a known object graph, then sleeps in 100 ms steps
// (allocating nothing on purpose) and prints "progress I" to stderr every step:
// - kept: the static field KnownHeap.Kept = new List<HeapNode>(20000) holds 20,000 HeapNode
//   objects; node k has Payload = new byte[1024] and Next = node k+1 (the last: null);
// - garbage: another 20,000 HeapNode (each with its byte[1024]) built the same way and
//   dropped before "heap ready" is printed: unreachable, collected by the next full GC.
// So after a full GC the heap holds exactly 20,000 HeapNode (class of two references: 32
// bytes on 64-bit), 20,000 byte[1024] from the graph (1,048 bytes each on 64-bit), one
// List<HeapNode> and its HeapNode[20000] (160,024 bytes), plus what the runtime holds.
// Stdout: "pid N", "runtime X", then "heap ready" once the graph is built.
//
// COUNTERS MODE ("counters SECONDS"): publishes counters with known values, then loops
// every 10 ms (printing "progress I" to stderr every 100 loops):
// - EventCounters of the EventSource "EventPipeRs-Counters" (every runtime):
//   - "fixed-gauge" (PollingCounter, DisplayName "Fixed Gauge", DisplayUnits "MB"): 42.5,
//     so every Mean payload has Mean = Min = Max = 42.5;
//   - "request-latency" (EventCounter, DisplayName "Request Latency", DisplayUnits "ms"):
//     WriteMetric(3.0) every loop, so Mean = Min = Max = 3, StandardDeviation = 0;
//   - "fixed-total" (IncrementingPollingCounter, DisplayName "Fixed Total"): a total that
//     grows by 7 each time the runtime polls it (once an interval), so every Increment = 7.
// - Meters, where the runtime has System.Diagnostics.Metrics (.NET 6+; made through
//   reflection, since mcs compiles against .NET Framework's libraries): the meter
//   "EventPipeRs.TestMeter" with
//   - "temperature" (ObservableGauge<double>, unit "Cel"): 21.5;
//   - "orders" (ObservableCounter<long>, unit "{order}"): 5 more at each observation, so
//     each interval's rate after the first is 5;
//   - "latency" (Histogram<double>, unit "ms"): Record(10.0) every loop, so every quantile
//     is 10.
// Stdout: "pid N", "runtime X", then "counters ready meters=yes" (or "meters=no").
// ---------------------------------------------------------------------------------------

using System;
using System.Diagnostics.Tracing;
using System.Globalization;
using System.Threading;

public enum Color { Red = 1, Green = 2, Blue = 4 }

[EventSource(Name = "EventPipeRs-Test")]
public sealed class TestEvents : EventSource
{
    public static readonly TestEvents Log = new TestEvents();

    public static class Keywords
    {
        public const EventKeywords Numbers = (EventKeywords)0x1;
        public const EventKeywords Text = (EventKeywords)0x2;
        public const EventKeywords Binary = (EventKeywords)0x4;
        public const EventKeywords Misc = (EventKeywords)0x8;
    }

    [Event(1, Level = EventLevel.Informational, Keywords = Keywords.Numbers)]
    // SAFETY: the EventData array is stackalloc'd here and every pointer in it is the address
    // of a parameter of this frame; WriteEventCore reads them before this method returns.
    public unsafe void Ints(int Iter, int Negative, int Max, int Min)
    {
        if (!IsEnabled()) return;
        EventData* d = stackalloc EventData[4];
        Set(ref d[0], &Iter, 4);
        Set(ref d[1], &Negative, 4);
        Set(ref d[2], &Max, 4);
        Set(ref d[3], &Min, 4);
        WriteEventCore(1, 4, d);
    }

    [Event(2, Level = EventLevel.Informational, Keywords = Keywords.Numbers)]
    // SAFETY: the EventData array is stackalloc'd here and every pointer in it is the address
    // of a parameter of this frame; WriteEventCore reads them before this method returns.
    public unsafe void Longs(long Iter, long Min, long Max, long Scaled)
    {
        if (!IsEnabled()) return;
        EventData* d = stackalloc EventData[4];
        Set(ref d[0], &Iter, 8);
        Set(ref d[1], &Min, 8);
        Set(ref d[2], &Max, 8);
        Set(ref d[3], &Scaled, 8);
        WriteEventCore(2, 4, d);
    }

    [Event(3, Level = EventLevel.Verbose, Keywords = Keywords.Numbers)]
    // SAFETY: the EventData array is stackalloc'd here and every pointer in it is the address
    // of a parameter of this frame; WriteEventCore reads them before this method returns.
    public unsafe void Doubles(int Iter, double Quarter, double Third, double Negative)
    {
        if (!IsEnabled()) return;
        EventData* d = stackalloc EventData[4];
        Set(ref d[0], &Iter, 4);
        Set(ref d[1], &Quarter, 8);
        Set(ref d[2], &Third, 8);
        Set(ref d[3], &Negative, 8);
        WriteEventCore(3, 4, d);
    }

    [Event(4, Level = EventLevel.Informational, Keywords = Keywords.Text)]
    // SAFETY: as above; the strings are pinned by `fixed` for the WriteEventCore call, and each
    // size covers the characters plus the terminating NUL .NET guarantees after a string.
    public unsafe void Text(int Iter, string Message, string Empty)
    {
        if (!IsEnabled()) return;
        if (Message == null) Message = "";
        if (Empty == null) Empty = "";
        fixed (char* m = Message)
        fixed (char* e = Empty)
        {
            EventData* d = stackalloc EventData[3];
            Set(ref d[0], &Iter, 4);
            Set(ref d[1], m, (Message.Length + 1) * 2);
            Set(ref d[2], e, (Empty.Length + 1) * 2);
            WriteEventCore(4, 3, d);
        }
    }

    [Event(5, Level = EventLevel.Informational, Keywords = Keywords.Binary)]
    public void Blob(long Iter, byte[] Data) { WriteEvent(5, Iter, Data); }

    [Event(6, Level = EventLevel.Informational, Keywords = Keywords.Misc)]
    // SAFETY: the EventData array is stackalloc'd here and every pointer in it is the address
    // of a parameter of this frame; WriteEventCore reads them before this method returns.
    public unsafe void Ident(int Iter, Guid Id)
    {
        if (!IsEnabled()) return;
        EventData* d = stackalloc EventData[2];
        Set(ref d[0], &Iter, 4);
        Set(ref d[1], &Id, 16);
        WriteEventCore(6, 2, d);
    }

    [Event(7, Level = EventLevel.Warning, Keywords = Keywords.Misc)]
    public void Choice(int Iter, Color Color) { WriteEvent(7, Iter, (int)Color); }

    [Event(8, Level = EventLevel.Informational, Keywords = Keywords.Misc)]
    public void Mixed(int Iter, long Square, double Half, string Name, Guid Id, Color Color)
    {
        if (IsEnabled()) WriteEvent(8, Iter, Square, Half, Name, Id, Color);
    }

    [Event(9, Level = EventLevel.Informational, Keywords = Keywords.Misc)]
    public void Heartbeat() { WriteEvent(9); }

    // SAFETY: only stores the pointer and size; callers keep the memory alive (see above).
    static unsafe void Set(ref EventData d, void* p, int size)
    {
        d.DataPointer = (IntPtr)p;
        d.Size = size;
    }
}

public sealed class HeapNode
{
    public byte[] Payload;
    public HeapNode Next;
}

public static class KnownHeap
{
    public const int Count = 20000;
    public static System.Collections.Generic.List<HeapNode> Kept;

    static HeapNode Chain(System.Collections.Generic.List<HeapNode> into)
    {
        HeapNode first = null, last = null;
        for (int k = 0; k < Count; k++)
        {
            var node = new HeapNode { Payload = new byte[1024] };
            if (last != null) last.Next = node; else first = node;
            last = node;
            if (into != null) into.Add(node);
        }
        return first;
    }

    // Not inlined, so no reference to the garbage chain outlives this frame.
    [System.Runtime.CompilerServices.MethodImpl(System.Runtime.CompilerServices.MethodImplOptions.NoInlining)]
    static void BuildGarbage() { GC.KeepAlive(Chain(null)); }

    public static void Build()
    {
        Kept = new System.Collections.Generic.List<HeapNode>(Count);
        Chain(Kept);
        BuildGarbage();
    }
}

[EventSource(Name = "EventPipeRs-Counters")]
public sealed class CountersSource : EventSource
{
    public static readonly CountersSource Log = new CountersSource();
}

/// The counters mode's instruments, built through reflection: the counter types are not
/// in the .NET Framework libraries mcs compiles against.
public static class KnownCounters
{
    static object latency;
    static System.Reflection.MethodInfo writeMetric;
    static object histogram;
    static System.Reflection.MethodInfo record;
    static long total;
    static long orders;

    static Type CoreType(string name)
    {
        return typeof(EventSource).Assembly.GetType(name, true);
    }

    static object Counter(string typeName, string name, object provider, string display, string units)
    {
        var type = CoreType(typeName);
        object counter = provider == null
            ? Activator.CreateInstance(type, name, CountersSource.Log)
            : Activator.CreateInstance(type, name, CountersSource.Log, provider);
        type.GetProperty("DisplayName").SetValue(counter, display, null);
        if (units != null) type.GetProperty("DisplayUnits").SetValue(counter, units, null);
        return counter;
    }

    public static bool Start()
    {
        Counter("System.Diagnostics.Tracing.PollingCounter", "fixed-gauge",
                (Func<double>)(() => 42.5), "Fixed Gauge", "MB");
        latency = Counter("System.Diagnostics.Tracing.EventCounter", "request-latency", null,
                          "Request Latency", "ms");
        writeMetric = latency.GetType().GetMethod("WriteMetric", new[] { typeof(double) });
        Counter("System.Diagnostics.Tracing.IncrementingPollingCounter", "fixed-total",
                (Func<double>)(() => Interlocked.Add(ref total, 7)), "Fixed Total", null);
        return StartMeters();
    }

    static System.Reflection.MethodInfo Create(Type meter, string name, Type valueType, int parameters)
    {
        foreach (var m in meter.GetMethods())
        {
            if (m.Name != name || !m.IsGenericMethodDefinition) continue;
            var ps = m.GetParameters();
            if (ps.Length != parameters) continue;
            if (parameters == 4 && !(ps[1].ParameterType.IsGenericType
                && ps[1].ParameterType.GetGenericTypeDefinition() == typeof(Func<>))) continue;
            if (parameters == 3 && ps[1].ParameterType != typeof(string)) continue;
            return m.MakeGenericMethod(valueType);
        }
        throw new MissingMethodException(meter.FullName, name);
    }

    static bool StartMeters()
    {
        var meterType = Type.GetType("System.Diagnostics.Metrics.Meter, System.Diagnostics.DiagnosticSource");
        if (meterType == null) return false;
        object meter = Activator.CreateInstance(meterType, "EventPipeRs.TestMeter");
        Create(meterType, "CreateObservableGauge", typeof(double), 4).Invoke(meter, new object[] {
            "temperature", (Func<double>)(() => 21.5), "Cel", "A fixed temperature" });
        Create(meterType, "CreateObservableCounter", typeof(long), 4).Invoke(meter, new object[] {
            "orders", (Func<long>)(() => Interlocked.Add(ref orders, 5)), "{order}", "Orders so far" });
        histogram = Create(meterType, "CreateHistogram", typeof(double), 3).Invoke(meter, new object[] {
            "latency", "ms", "A fixed latency" });
        record = histogram.GetType().GetMethod("Record", new[] { typeof(double) });
        return true;
    }

    public static void Tick()
    {
        writeMetric.Invoke(latency, new object[] { 3.0 });
        if (histogram != null) record.Invoke(histogram, new object[] { 10.0 });
    }
}

static class Program
{
    static readonly Color[] Colors = { Color.Red, Color.Green, Color.Blue };

    static int Main(string[] args)
    {
        bool heap = args.Length > 0 && args[0] == "heap";
        bool counters = args.Length > 0 && args[0] == "counters";
        if (heap || counters) args = args.Length > 1 ? new[] { args[1] } : new string[0];
        double seconds = 5;
        if (args.Length > 0)
        {
            if (args[0] == "forever") seconds = 0;
            else if (!double.TryParse(args[0], NumberStyles.Float, CultureInfo.InvariantCulture, out seconds)
                     || seconds < 0 || double.IsNaN(seconds) || double.IsInfinity(seconds))
            {
                Console.Error.WriteLine("usage: TestApp.exe SECONDS   (fractional ok; 0 or forever = until killed)");
                return 2;
            }
        }

        Console.WriteLine("pid " + System.Diagnostics.Process.GetCurrentProcess().Id);
        Console.WriteLine("runtime " + Environment.Version);
        Console.Out.Flush();
        if (heap) return HeapMode(seconds);
        if (counters) return CountersMode(seconds);

        var log = TestEvents.Log;
        var ring = new byte[20000][];
        int ringPos = 0;
        var sizes = new Random(12345);
        object large = null;
        long exceptions = 0;
        long i = 0;
        var clock = System.Diagnostics.Stopwatch.StartNew();
        long limitMs = seconds == 0 ? long.MaxValue : (long)Math.Ceiling(seconds * 1000.0);

        while (clock.ElapsedMilliseconds < limitMs)
        {
            int n = (int)i;
            byte bi = (byte)(i & 0xff);
            var id = new Guid(n, 0x0102, 0x0304, 5, 6, 7, 8, 9, 10, 11, bi);
            var color = Colors[i % 3];

            log.Ints(n, -n - 1, int.MaxValue, int.MinValue);
            log.Longs(i, long.MinValue, long.MaxValue, i * 1000000007L - 5000000000L);
            log.Doubles(n, i + 0.25, i / 3.0, -1.0 - 1.5 * i);
            log.Text(n, "iter " + i.ToString(CultureInfo.InvariantCulture)
                        + " h\u00e9llo w\u00f6rld \u4e16\u754c \uD83E\uDD80", "");
            var data = new byte[i % 17];
            for (int k = 0; k < data.Length; k++) data[k] = (byte)((i + k) & 0xff);
            log.Blob(i, data);
            log.Ident(n, id);
            log.Choice(n, color);
            log.Mixed(n, i * i, i / 2.0, "n" + i.ToString(CultureInfo.InvariantCulture), id, color);
            if (i % 100 == 0)
            {
                log.Heartbeat();
                Console.Error.WriteLine("progress " + i.ToString(CultureInfo.InvariantCulture));
            }

            for (int k = 0; k < 200; k++)
            {
                ring[ringPos] = new byte[16 + sizes.Next(4096)];
                ringPos = (ringPos + 1) % ring.Length;
            }
            if (i % 50 == 0) large = new byte[120000];
            if (i % 1000 == 0 && i > 0) GC.Collect();
            if (i % 10 == 0)
            {
                try { throw new InvalidOperationException("TestApp exception " + i.ToString(CultureInfo.InvariantCulture)); }
                catch (InvalidOperationException) { exceptions++; }
            }

            i++;
            Thread.Sleep(1);
        }

        GC.KeepAlive(large);
        return Done(i, exceptions);
    }

    static int CountersMode(double seconds)
    {
        bool meters = KnownCounters.Start();
        Console.WriteLine("counters ready meters=" + (meters ? "yes" : "no"));
        Console.Out.Flush();
        var clock = System.Diagnostics.Stopwatch.StartNew();
        long limitMs = seconds == 0 ? long.MaxValue : (long)Math.Ceiling(seconds * 1000.0);
        long step = 0;
        while (clock.ElapsedMilliseconds < limitMs)
        {
            KnownCounters.Tick();
            Thread.Sleep(10);
            step++;
            if (step % 100 == 0)
                Console.Error.WriteLine("progress " + step.ToString(CultureInfo.InvariantCulture));
        }
        return Done(0, 0);
    }

    static int HeapMode(double seconds)
    {
        KnownHeap.Build();
        Console.WriteLine("heap ready");
        Console.Out.Flush();
        var clock = System.Diagnostics.Stopwatch.StartNew();
        long limitMs = seconds == 0 ? long.MaxValue : (long)Math.Ceiling(seconds * 1000.0);
        long step = 0;
        while (clock.ElapsedMilliseconds < limitMs)
        {
            Thread.Sleep(100);
            step++;
            Console.Error.WriteLine("progress " + step.ToString(CultureInfo.InvariantCulture));
        }
        GC.KeepAlive(KnownHeap.Kept);
        return Done(0, 0);
    }

    static int Done(long i, long exceptions)
    {
        Console.WriteLine("done iterations=" + i + " exceptions=" + exceptions
            + " gc0=" + GC.CollectionCount(0) + " gc1=" + GC.CollectionCount(1)
            + " gc2=" + GC.CollectionCount(2));
        return 0;
    }
}
