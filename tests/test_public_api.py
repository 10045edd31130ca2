import ragdx


def test_all_names_exist_and_nothing_private_leaks():
    for name in ragdx.__all__:
        assert hasattr(ragdx, name), name
    assert len(set(ragdx.__all__)) == len(ragdx.__all__)
    assert not [n for n in ragdx.__all__ if n.startswith("_") and n != "__version__"]


def test_import_has_no_heavy_side_effects():
    import subprocess
    import sys
    code = ("import sys, ragdx; heavy = [m for m in ('torch', 'sentence_transformers', 'pypdf', "
            "'onnxruntime', 'psycopg') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
