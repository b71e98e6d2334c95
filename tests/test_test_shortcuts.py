"""The tests' own shortcuts (tests/conftest.py installs them for every test):
each saves the time it was made for and changes no result."""
from pathlib import Path

from helpers.paths import CONFIG_DIR


def test_a_config_reads_mmdets_and_mmsegs_metafiles_once_a_process(monkeypatch):
    """helpers/config_metafiles.py: loading a config again reads no
    ``.mim`` metafile again, mmdet's (``.yml``) nor mmseg's (``.yaml``), and
    resolves to the same config."""
    from mmengine.config import utils
    from mmengine.fileio.backends import LocalBackend

    from mavit_mm.tooling.config import load_config

    read = []
    get_text = LocalBackend.get_text

    def recording(self, filepath, *args, **kwargs):
        read.append(Path(filepath))
        return get_text(self, filepath, *args, **kwargs)
    monkeypatch.setattr(LocalBackend, 'get_text', recording)
    utils.load.cache_clear()   # (what earlier tests read)
    for config, suffix in (('mask_rcnn/mask-rcnn_mavit-t_fpn_1x_coco.py', '.yml'),
                           ('sem_fpn/fpn_mavit-t_8xb2-80k_ade20k-512x512.py', '.yaml')):
        first = load_config(CONFIG_DIR / config).to_dict()
        assert any(path.name == f'metafile{suffix}' for path in read), (config, read[:3])
        read.clear()
        assert load_config(CONFIG_DIR / config).to_dict() == first
        assert not [path for path in read if '.mim' in path.parts], (config, read[:3])
