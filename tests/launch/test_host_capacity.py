"""A worker count no host could start is refused in one line before anything forks."""
from launch import host_capacity, lab, torchrun

GIB = 1 << 30


def test_available_bytes_reads_memavailable(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       32768000 kB\nMemFree:  100 kB\nMemAvailable:   24000000 kB\n")
    assert host_capacity.available_bytes(str(meminfo)) == 24000000 * 1024
    meminfo.write_text("MemTotal:       32768000 kB\n")
    assert host_capacity.available_bytes(str(meminfo)) is None
    assert host_capacity.available_bytes(str(tmp_path / "missing")) is None


def test_workers_problem_names_the_count_the_host_holds():
    assert host_capacity.workers_problem("--nproc-per-node", "8", 8, 24 * GIB) is None
    line = host_capacity.workers_problem("--nproc-per-node", "100000", 100000, 24 * GIB)
    assert line == ("--nproc-per-node: got 100000, 100,000 worker processes on this host; allowed: at most 223 "
                    "here (each imports torch, at least 110 MiB, and this host has 24.0 GiB available)")
    # unknown memory refuses nothing; a tiny host still allows one worker
    assert host_capacity.workers_problem("--nproc-per-node", "100000", 100000, None) is None
    assert host_capacity.workers_problem("--nproc-per-node", "1", 1, 1 << 20) is None


def test_torchrun_refuses_a_huge_nproc_before_forking(monkeypatch, capsys):
    import torch.distributed.run

    monkeypatch.setattr(host_capacity, "available_bytes", lambda: 24 * GIB)
    monkeypatch.setattr(torch.distributed.run, "main", lambda argv: (_ for _ in ()).throw(AssertionError("forked")))
    assert torchrun.main(["--nproc-per-node", "100000", "-m", "trainer", "recipes/tiny_llama_lora.yaml"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --nproc-per-node: got 100000, 100,000 worker processes")


def test_lab_counts_every_emulated_nodes_workers(monkeypatch, capsys):
    monkeypatch.setattr(host_capacity, "available_bytes", lambda: 24 * GIB)
    argv = ["--nodes", "200", "--nproc-per-node", "64", "--rate", "1gbit", "--", "recipes/tiny_llama_lora.yaml",
            "train.global_batch_size=51200"]
    assert lab.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --nodes x --nproc-per-node: got 200 x 64, 12,800 worker processes on this host; allowed: "
                   "at most 223 here (each imports torch, at least 110 MiB, and this host has 24.0 GiB available)"]


def test_a_lab_too_big_for_the_host_is_one_line_not_also_the_recipe_judged_on_that_world(monkeypatch, capsys):
    # the recipe's batch judged on 200 ranks was a second line about the same numbers
    monkeypatch.setattr(host_capacity, "available_bytes", lambda: 1 * GIB)
    assert lab.main(["--nodes", "50", "--nproc-per-node", "4", "--rate", "1gbit", "--",
                     "recipes/tiny_llama_lora.yaml"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --nodes x --nproc-per-node: got 50 x 4, 200 worker processes")
