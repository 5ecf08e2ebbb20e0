// AnalyzeApp: scenarios whose truth the .NET runtime reports about itself, so that
// `eptrace analyze` can be held against the runtime's own accounting.
//
// Build: mcs -out:AnalyzeApp.exe AnalyzeApp.cs   (ci/dotnet.sh does this, plus the
//        AnalyzeApp.runtimeconfig.json that runs it on .NET 8)
// Run:   dotnet AnalyzeApp.exe        runs every scenario once, prints, exits 0
//        dotnet AnalyzeApp.exe --wait prints "pid N" and "ready", and starts once a line
//                                     arrives on stdin (a tracer attaches meanwhile: .NET
//                                     Core 3.1 has no diagnostic port to start suspended);
//                                     then prints the runtime's counts so far as start_gc0,
//                                     start_gc1, start_gc2 and start_pause_ms
//        dotnet AnalyzeApp.exe --wait --hold   also waits for another line after "done"
//                                     before exiting (a watcher reads its totals meanwhile)
//        dotnet AnalyzeApp.exe --park  parks threads in known methods for `eptrace stack`:
//                                     HoldMonitor (holds a lock, sleeps), WaitOnMonitor
//                                     (Monitor.Enter on it), SleepLong (Thread.Sleep) and
//                                     WaitOnTask (Task.Wait on a task that never ends); prints
//                                     "pid N" and "ready", and exits at a line on stdin
//        dotnet AnalyzeApp.exe --gc-storm  keeps 2,000,000 objects live and collects them
//                                     over and over (blocking gen2 GCs, induced, 2 ms apart)
//                                     on a thread named "collector" (in CollectForever), so
//                                     the program is suspended for a GC most of the time, while a thread
//                                     named "spinner" runs managed code (SpinManaged); prints
//                                     "pid N" and "ready", and exits at a line on stdin
//
// Scenarios, in order:
//   gc          5 induced gen0, 3 induced gen1 and 2 induced blocking gen2 collections, each
//               after 100,000 more objects are made live (so each GC has real work: its
//               pause is long beside the suspension around it), then 200,000 small and
//               (in LargeAllocations) 60 large (200 KB, LOH) allocations
//   contention  20 rounds: a thread holds a lock for 30 ms while the main thread asks for it
//               (in WaitForGate, which times its own waits)
//   exceptions  40 AnalyzeApp.ScenarioException("scenario one") and 25
//               System.InvalidOperationException("scenario two"), each thrown and caught
//   starvation  12 thread pool work items that each block their worker for 800 ms
//               (Thread.Sleep: no blocking notification, so only starvation injects workers)
//
// Stdout, after the scenarios, one "key value" line each (the runtime's own numbers; APIs
// newer than mcs's class library are called by reflection, and a line is left out where the
// runtime lacks the API):
//   gc0 N / gc1 N / gc2 N        GC.CollectionCount(0/1/2)
//   pause_ms X                   GC.GetTotalPauseDuration() (.NET 7+)
//   contentions N                Monitor.LockContentionCount (.NET Core 3.0+)
//   jit_methods N / jit_ms X     JitInfo.GetCompiledMethodCount/GetCompilationTime (.NET 6+)
//   threads N                    ThreadPool.ThreadCount (.NET Core 3.0+)
//   thrown_scenario_one N / thrown_scenario_two N   the exceptions this app threw
//   large_bytes N                the bytes LargeAllocations allocated
//                                (GC.GetAllocatedBytesForCurrentThread, .NET Core 3.0+)
//   contention_wait_ms X         how long WaitForGate waited for the lock (Stopwatch)
//   done

using System;
using System.Diagnostics;
using System.Reflection;
using System.Runtime.CompilerServices;
using System.Threading;
using System.Threading.Tasks;

class ScenarioException : Exception
{
    public ScenarioException(string message) : base(message) { }
}

static class AnalyzeApp
{
    static readonly object Gate = new object();
    static long sink;
    static long largeBytes = -1;
    static double contentionWaitMs;

    static int Main(string[] args)
    {
        if (args.Length > 0 && args[0] == "--park")
        {
            Park();
            return 0;
        }
        if (args.Length > 0 && args[0] == "--gc-storm")
        {
            GcStorm();
            return 0;
        }
        bool wait = args.Length > 0 && args[0] == "--wait";
        bool hold = wait && args.Length > 1 && args[1] == "--hold";
        if (wait)
        {
            Console.WriteLine("pid " + System.Diagnostics.Process.GetCurrentProcess().Id);
            Console.WriteLine("ready");
            Console.Out.Flush();
            Console.ReadLine();
            Console.WriteLine("start_gc0 " + GC.CollectionCount(0));
            Console.WriteLine("start_gc1 " + GC.CollectionCount(1));
            Console.WriteLine("start_gc2 " + GC.CollectionCount(2));
            Console.WriteLine("start_pause_ms " + PauseMs());
        }
        Collections();
        Contention();
        int one = 0, two = 0;
        Exceptions(ref one, ref two);
        Starvation();

        Console.WriteLine("gc0 " + GC.CollectionCount(0));
        Console.WriteLine("gc1 " + GC.CollectionCount(1));
        Console.WriteLine("gc2 " + GC.CollectionCount(2));
        string pauseMs = PauseMs();
        if (pauseMs != null)
            Console.WriteLine("pause_ms " + pauseMs);
        PropertyInfo contentions = typeof(Monitor).GetProperty("LockContentionCount");
        if (contentions != null)
            Console.WriteLine("contentions " + contentions.GetValue(null, null));
        Type jit = Type.GetType("System.Runtime.JitInfo");
        if (jit != null)
        {
            MethodInfo count = jit.GetMethod("GetCompiledMethodCount", new[] { typeof(bool) });
            MethodInfo time = jit.GetMethod("GetCompilationTime", new[] { typeof(bool) });
            Console.WriteLine("jit_methods " + count.Invoke(null, new object[] { false }));
            Console.WriteLine("jit_ms " + Invariant(((TimeSpan)time.Invoke(null, new object[] { false })).TotalMilliseconds));
        }
        PropertyInfo threads = typeof(ThreadPool).GetProperty("ThreadCount");
        if (threads != null)
            Console.WriteLine("threads " + threads.GetValue(null, null));
        Console.WriteLine("thrown_scenario_one " + one);
        Console.WriteLine("thrown_scenario_two " + two);
        if (largeBytes >= 0)
            Console.WriteLine("large_bytes " + largeBytes);
        Console.WriteLine("contention_wait_ms " + Invariant(contentionWaitMs));
        Console.WriteLine("done " + (sink > 0 ? "ok" : "?"));
        Console.Out.Flush();
        if (hold)
            Console.ReadLine();
        return 0;
    }

    static void Park()
    {
        object gate = new object();
        ManualResetEvent held = new ManualResetEvent(false);
        Start("monitor-holder", () => HoldMonitor(gate, held));
        held.WaitOne();
        Start("monitor-waiter", () => WaitOnMonitor(gate));
        Start("sleeper", SleepLong);
        TaskCompletionSource<int> never = new TaskCompletionSource<int>();
        Start("task-waiter", () => WaitOnTask(never.Task));
        // Long enough for each thread to reach its place.
        Thread.Sleep(500);
        Console.WriteLine("pid " + System.Diagnostics.Process.GetCurrentProcess().Id);
        Console.WriteLine("ready");
        Console.Out.Flush();
        Console.ReadLine();
    }

    class Node
    {
        public Node Next;
        public Node(Node next) { Next = next; }
    }

    static Node live;

    static void GcStorm()
    {
        Node head = null;
        for (int i = 0; i < 2000000; i++)
            head = new Node(head);
        live = head;
        string pid = "pid " + System.Diagnostics.Process.GetCurrentProcess().Id;
        Start("spinner", SpinManaged);
        Start("collector", CollectForever);
        Thread.Sleep(300);
        Console.WriteLine(pid);
        Console.WriteLine("ready");
        Console.Out.Flush();
        Console.ReadLine();
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void CollectForever()
    {
        while (true)
        {
            GC.Collect(2, GCCollectionMode.Forced, true);
            // A breath between GCs: without it, the other threads (this program's, and
            // the runtime's sample profiler) never get to run.
            Thread.Sleep(2);
        }
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void SpinManaged()
    {
        long x = 1;
        while (true)
        {
            // A call each round: its return is where the runtime can stop this thread
            // for a GC (a loop without one may not be interruptible).
            x = Step(x);
            if (x == 0)
                sink++;
        }
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static long Step(long x)
    {
        for (int i = 0; i < 1000; i++)
            x = x * 6364136223846793005L + 1442695040888963407L;
        return x;
    }

    static void Start(string name, ThreadStart body)
    {
        Thread t = new Thread(body);
        t.Name = name;
        t.IsBackground = true;
        t.Start();
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void HoldMonitor(object gate, ManualResetEvent held)
    {
        lock (gate)
        {
            held.Set();
            Thread.Sleep(Timeout.Infinite);
        }
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void WaitOnMonitor(object gate)
    {
        lock (gate)
        {
            sink++;
        }
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void SleepLong()
    {
        Thread.Sleep(Timeout.Infinite);
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void WaitOnTask(Task<int> task)
    {
        task.Wait();
    }

    // GC.GetTotalPauseDuration() in ms (.NET 7+), or null.
    static string PauseMs()
    {
        MethodInfo pause = typeof(GC).GetMethod("GetTotalPauseDuration", Type.EmptyTypes);
        return pause == null ? null : Invariant(((TimeSpan)pause.Invoke(null, null)).TotalMilliseconds);
    }

    static string Invariant(double value)
    {
        return value.ToString("R", System.Globalization.CultureInfo.InvariantCulture);
    }

    static void Collections()
    {
        System.Collections.Generic.List<object> live = new System.Collections.Generic.List<object>();
        int[] generations = { 0, 0, 0, 0, 0, 1, 1, 1, 2, 2 };
        foreach (int generation in generations)
        {
            for (int i = 0; i < 100000; i++) live.Add(new int[4]);
            GC.Collect(generation, GCCollectionMode.Forced, true);
        }
        sink += live.Count;
        live = null;
        for (int i = 0; i < 200000; i++)
        {
            byte[] small = new byte[1000];
            sink += small.Length;
        }
        LargeAllocations();
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void LargeAllocations()
    {
        MethodInfo allocated = typeof(GC).GetMethod("GetAllocatedBytesForCurrentThread", Type.EmptyTypes);
        long before = allocated != null ? (long)allocated.Invoke(null, null) : 0;
        for (int i = 0; i < 60; i++)
        {
            byte[] large = new byte[200000];
            sink += large.Length;
        }
        if (allocated != null)
            largeBytes = (long)allocated.Invoke(null, null) - before;
    }

    static void Contention()
    {
        for (int round = 0; round < 20; round++)
        {
            ManualResetEvent held = new ManualResetEvent(false);
            Thread holder = new Thread(() =>
            {
                lock (Gate)
                {
                    held.Set();
                    Thread.Sleep(30);
                }
            });
            holder.Start();
            held.WaitOne();
            WaitForGate();
            holder.Join();
        }
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void WaitForGate()
    {
        Stopwatch waited = Stopwatch.StartNew();
        lock (Gate) { contentionWaitMs += waited.Elapsed.TotalMilliseconds; sink++; }
    }

    static void Exceptions(ref int one, ref int two)
    {
        for (int i = 0; i < 40; i++)
        {
            try { throw new ScenarioException("scenario one"); }
            catch (ScenarioException) { one++; }
        }
        for (int i = 0; i < 25; i++)
        {
            try { throw new InvalidOperationException("scenario two"); }
            catch (InvalidOperationException) { two++; }
        }
    }

    static void Starvation()
    {
        const int items = 12;
        CountdownEvent finished = new CountdownEvent(items);
        for (int i = 0; i < items; i++)
        {
            ThreadPool.QueueUserWorkItem(_ =>
            {
                Thread.Sleep(800);
                finished.Signal();
            });
        }
        finished.Wait();
    }
}
