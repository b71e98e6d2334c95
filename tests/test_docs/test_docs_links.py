"""README.md and docs/ link only to files that exist, and name no work items."""
import re

import pytest
from helpers.paths import REPO_ROOT

PAGES = [REPO_ROOT / 'README.md', REPO_ROOT / 'benchmarks' / 'results' / 'README.md',
         *sorted((REPO_ROOT / 'docs').glob('*.md'))]
LINK = re.compile(r'\]\(([^)#\s]+)(?:#[^)]*)?\)')


@pytest.mark.parametrize('page', PAGES, ids=lambda page: page.relative_to(REPO_ROOT).as_posix())
def test_relative_links_resolve(page):
    missing = [target for target in LINK.findall(page.read_text())
               if '://' not in target and not (page.parent / target).exists()]
    assert not missing, f'{page.name} links to missing files: {missing}'


@pytest.mark.parametrize('page', PAGES, ids=lambda page: page.relative_to(REPO_ROOT).as_posix())
def test_pages_name_no_work_items(page):
    found = re.findall(r'\b(?:[Ii]ssue|[Ss]top) \d+\b', page.read_text())
    assert not found, f'{page.name}: {found} (the git log keeps the history)'
