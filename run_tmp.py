import workbench, time
from workbench.lab.runner import run_experiment, Experiment
if __name__ == "__main__":
    with workbench.start(n_workers=2, timeout=60) as s:
        t = time.perf_counter()
        e = run_experiment(s, "histogram", size="ci", repeats=3, progress=False)
        print("took", time.perf_counter() - t)
        print(e.results.head(8).to_string())
        print(e.stats_table())
        e.save("build/exp1")
        e2 = Experiment.load("build/exp1"); print(len(e2.traces), e2.stats().shape)
        k = list(e.traces)[1]; print(e.traces[k].head(10).to_string())
        from workbench.runtime import trace
        print(trace.summary_by_action(e.traces[k]))
        print(trace.bytes_moved(e.traces[k]))
