"""The engine keeps the shape issue #37 gave it (tests/engine_shape.py measures; ``python3
tests/engine_shape.py`` prints every number): a lens is one place, the simulator one hook, the
instrumenter one function, the request typed, and no module or folder grows past reading."""

import pytest

from tests import engine_shape as shape
from tests.project.test_layers import cycles, project_files


def test_no_import_circle_even_counting_the_imports_made_for_annotations():
    assert cycles(project_files(), type_only=True) == []


def test_each_lens_word_is_used_by_at_most_four_engine_modules():
    # every engine folder counts, engine/compiled/ included (it calls its syncthreads points "syncs")
    used = shape.lens_word_modules()
    assert any(m.startswith("compiled/") for m in shape.engine_modules_rel()), "the measure reads compiled/"
    assert {w: mods for w, mods in used.items() if len(mods) > 4} == {}


def test_one_module_patches_numbas_simulator_and_one_function_applies_passes():
    # fastsim is the one install; the compiled engine takes launches through fastsim.route_launches
    assert shape.simulator_patchers() == ["sim/fastsim.py"]
    assert shape.pass_appliers() == ["instrument/instrumenter.py:instrument"]


def test_the_engine_reads_no_request_as_a_dict():
    assert shape.request_reads() == []


def test_at_most_one_engine_function_is_over_100_lines():
    assert len(shape.long_functions()) <= 1, shape.long_functions()


def test_no_engine_folder_holds_more_than_10_modules():
    assert {d: n for d, n in shape.folder_sizes().items() if n > 10} == {}


def test_the_measures_see_what_they_count(tmp_path):
    """Each measure fails on what it guards against: a planted module that reads a request dict, has a
    function of 102 lines that applies a pass, names a lens and imports numba's simulator."""
    planted = tmp_path / "planted.py"
    lines = "\n".join(f"    x{i} = {i}" for i in range(99))
    planted.write_text(
        "from numba.cuda import simulator\n"
        f"def long(request, p, fn, info):\n{lines}\n    p.apply(fn, info)\n    return request.get('accesses')\n"
    )
    paths = [*shape.engine_modules(), planted]
    assert shape.request_reads(paths) == ["planted.py:103"]
    assert ("planted.py:long", 102) in shape.long_functions(paths=paths)
    assert len(shape.pass_appliers(paths)) == 2
    assert "planted.py" in shape.lens_word_modules(paths)["accesses"]
    assert shape.simulator_patchers(paths) == ["sim/fastsim.py", "planted.py"]
    for line in ("import numba.cuda.simulator.kernel", "from numba.cuda.simulator import kernelapi"):
        planted.write_text(line + "\n")
        assert shape.simulator_patchers([planted]) == ["planted.py"]


def test_duplicates_outside_tests_are_few():
    pairs = shape.duplicate_pairs()
    if pairs is None:
        pytest.skip("the duplicates tool is not installed here")
    assert len(pairs) <= 15, pairs  # issue #37's bar (it measured 30)
