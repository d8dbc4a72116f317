import configparser


def read():
    c = configparser.ConfigParser()
    c.read("/app/config.ini")
    return c


def test_server_section():
    c = read()
    assert c["server"]["port"] == "8080" and c["server"]["debug"] == "false"
    assert c["server"]["host"] == "0.0.0.0"


def test_other_sections_unchanged():
    c = read()
    assert c["database"]["port"] == "5432" and c["database"]["debug"] == "true" and c["cache"]["ttl"] == "60"
